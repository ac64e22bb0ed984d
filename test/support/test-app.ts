import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig, type OrdoConfig } from '../../src/core/config/config';
import type { TenantScope } from '../../src/core/http/route-spec';
import { startOrdo, type RunningOrdo } from '../../src/ordo';
import { TenantsService } from '../../src/modules/tenants/tenants.service';
import { createTestDatabase, type TestDatabase } from './test-database';

export interface TestApp {
  url: string;
  ordo: RunningOrdo;
  testDb: TestDatabase;
  config: OrdoConfig;
  /** The bootstrap tenant ("default") and its admin token; a platform operator token. */
  tenantId: string;
  adminToken: string;
  platformToken: string;
  /** Creates another tenant and returns a token with the given scopes for it. */
  tenant(id: string, scopes?: TenantScope[]): Promise<{ tenantId: string; token: string }>;
  /** Mints a token for an existing tenant. */
  token(tenantId: string, scopes: TenantScope[]): Promise<string>;
  /** fetch against the app with JSON helpers; `as` sets Authorization and X-Tenant-Id. */
  request(method: string, url: string, opts?: RequestOpts): Promise<TestResponse>;
  close(): Promise<void>;
}

export interface RequestOpts {
  as?: { token: string; tenantId?: string };
  body?: unknown;
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
}

export interface TestResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

/** Boots Ordo (the given roles) on a fresh clone of the template database, listening on 127.0.0.1. */
export async function startTestApp(env: Record<string, string> = {}): Promise<TestApp> {
  const testDb = await createTestDatabase();
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-home-'));
  const config = loadConfig({
    ORDO_HOME: home,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    ORDO_ROLES: 'api',
    // Tests serve their own HTTP targets on loopback, as an operator would list a range of its own.
    ORDO_EGRESS_ALLOW_PRIVATE: '127.0.0.1',
    ...env,
  });
  const log = pino({ level: process.env.ORDO_TEST_LOG ?? 'silent' });
  const ordo = await startOrdo(config, log, {
    appUrl: testDb.appUrl,
    systemUrl: testDb.systemUrl,
    ownerUrl: testDb.ownerUrl,
  });
  const first = ordo.firstStart;
  if (!first?.created) throw new Error('expected a first start on a fresh database');

  const request = async (method: string, url: string, opts: RequestOpts = {}): Promise<TestResponse> => {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (opts.as) {
      headers.authorization = `Bearer ${opts.as.token}`;
      if (opts.as.tenantId !== undefined) headers['x-tenant-id'] = opts.as.tenantId;
    }
    let body: string | Buffer | undefined;
    if (opts.rawBody !== undefined) body = opts.rawBody;
    else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${ordo.url}${url}`, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = undefined;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, body: parsed, text };
  };

  const tenants = ordo.app.get(TenantsService, { strict: false });
  const token = async (tenantId: string, scopes: TenantScope[]) =>
    (await tenants.mintToken('test', tenantId, { scopes })).token;

  return {
    url: ordo.url,
    ordo,
    testDb,
    config,
    tenantId: first.tenantId,
    adminToken: first.adminToken,
    platformToken: first.platformToken,
    request,
    token,
    async tenant(id, scopes = ['orchestrator:admin']) {
      await tenants.create({ id, name: id });
      return { tenantId: id, token: await token(id, scopes) };
    },
    async close() {
      await ordo.close();
      await testDb.drop();
      fs.rmSync(home, { recursive: true, force: true });
    },
  };
}
