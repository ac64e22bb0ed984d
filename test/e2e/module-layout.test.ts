import { ModuleRef, ModulesContainer } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../src/core/config/config';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { startOrdo } from '../../src/ordo';
import { startTestApp, type TestApp } from '../support/test-app';

type Class = abstract new (...args: never[]) => object;

interface Instances {
  objects: Set<object>;
  /** "Module: token" of each place the class was found. */
  where: string[];
}

/**
 * The distinct objects of each provider and controller class in the application's container, by
 * class. Nest's own core module and each module's ModuleRef and module instance are left out.
 * Guards and interceptors named in decorators (@UseGuards) are not providers: Nest builds them per
 * module that uses them.
 */
function instancesByClass(app: NestFastifyApplication): Map<Class, Instances> {
  const out = new Map<Class, Instances>();
  for (const mod of app.get(ModulesContainer).values()) {
    if (mod.metatype.name === 'InternalCoreModule') continue;
    const wrappers: [unknown, InstanceWrapper][] = [...mod.providers, ...mod.controllers];
    for (const [token, wrapper] of wrappers) {
      const instance: unknown = wrapper.instance;
      if (token === ModuleRef || token === mod.metatype) continue;
      if (typeof instance !== 'object' || instance === null || instance.constructor === Object) continue;
      const cls = instance.constructor as Class;
      const entry = out.get(cls) ?? { objects: new Set<object>(), where: [] };
      entry.objects.add(instance);
      entry.where.push(`${mod.metatype.name}: ${typeof token === 'function' ? token.name : String(token)}`);
      out.set(cls, entry);
    }
  }
  return out;
}

describe('module layout', () => {
  let app: TestApp;

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler', ORDO_CLI_SANDBOX_REQUIRED: 'false' });
  });

  afterAll(async () => {
    await app?.close();
  });

  it('instantiates every provider and controller class once in a process of all three roles', () => {
    const byClass = instancesByClass(app.ordo.app);
    const twice = [...byClass]
      .filter(([, e]) => e.objects.size > 1)
      .map(([cls, e]) => `${cls.name} ×${e.objects.size} (${e.where.join(', ')})`);
    expect(twice).toEqual([]);
    // The walk sees the shared services: one RunsService (one creation batcher) for the API and the scheduler.
    for (const cls of [RunsService, RunsRepository, DagsRepository])
      expect({ cls: cls.name, n: byClass.get(cls)?.objects.size }).toEqual({ cls: cls.name, n: 1 });
    expect(byClass.size).toBeGreaterThan(40);
  });

  it.each(['worker', 'scheduler'])('serves no api route in a %s-only process', async (roles) => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), `ordo-layout-${roles}-`));
    const ordo = await startOrdo(
      loadConfig({
        ORDO_HOME: home,
        ORDO_SIGNING_KEYS_DIR: path.join(app.config.home, 'keys'),
        PORT: '0',
        HOST: '127.0.0.1',
        ORDO_ROLES: roles,
        LOG_LEVEL: 'silent',
        ORDO_CLI_SANDBOX_REQUIRED: 'false',
      }),
      pino({ level: 'silent' }),
      { appUrl: app.testDb.appUrl, systemUrl: app.testDb.systemUrl, ownerUrl: app.testDb.ownerUrl },
    );
    try {
      const doc = (await (await fetch(`${ordo.url}/api/v1/openapi.json`)).json()) as { paths: object };
      expect(Object.keys(doc.paths).sort()).toEqual(['/api/v1/openapi.json', '/healthz', '/metrics', '/readyz']);
      const secrets = await fetch(`${ordo.url}/api/v1/secrets`, {
        headers: { authorization: `Bearer ${app.adminToken}`, 'x-tenant-id': app.tenantId },
      });
      expect(secrets.status).toBe(404);
    } finally {
      await ordo.close();
      fs.rmSync(home, { recursive: true, force: true });
    }
  });
});
