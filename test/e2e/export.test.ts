import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runCli } from '../../src/cli/main';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../src/modules/export/export-format';
import { verifyExport } from '../../src/modules/export/export-verify';
import { appendEvents, insertRun, insertStepWithAttempt } from '../factories/run-events';
import { startTestApp, type TestApp } from '../support/test-app';

describe('GET /api/v1/export and ordo export', () => {
  let app: TestApp;
  let tmp: string;
  const runIdsA: string[] = [];

  beforeAll(async () => {
    app = await startTestApp();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-export-e2e-'));
    const db = app.ordo.database.system;
    for (const [dag, hour] of [
      ['ingest', 1],
      ['report', 2],
    ] as const) {
      const at = new Date(Date.UTC(2026, 2, 1, hour));
      const run = await insertRun(db, app.tenantId, dag, {
        startedAt: at,
        status: 'succeeded',
        finishedAt: new Date(at.getTime() + 1000),
      });
      await appendEvents(db, run, [
        { type: 'run.created', createdAt: at },
        { type: 'run.running', createdAt: at },
        { type: 'run.succeeded', createdAt: at },
      ]);
      await insertStepWithAttempt(db, run, 'only', { logs: 'hello\n', at });
      runIdsA.push(run.runId);
    }
  });

  afterAll(async () => {
    await app.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const admin = () => ({ as: { token: app.adminToken, tenantId: app.tenantId } });

  /** Splits the HTTP form (NDJSON whose last line is the signed manifest) into an export directory. */
  function split(body: string, dir: string): Record<string, any> {
    const lines = body.split('\n').filter(Boolean);
    const last = JSON.parse(lines.pop()!) as Record<string, any>;
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, NDJSON_FILE), lines.map((l) => `${l}\n`).join(''));
    fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(last.manifest));
    fs.writeFileSync(path.join(dir, JWS_FILE), last.jws as string);
    fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(last.publicJwk));
    return last;
  }

  it('streams NDJSON whose last line is the signed manifest, verifiable offline', async () => {
    const r = await app.request('GET', '/api/v1/export', admin());
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    const last = split(r.text, path.join(tmp, 'http'));
    expect(last.type).toBe('manifest');
    expect(last.manifest.counts).toMatchObject({ run: 2, event: 6, step: 2, attempt: 2, log: 2, span: 6 });
    expect(last.kid).toBe(last.publicJwk.kid);
    expect(await verifyExport(path.join(tmp, 'http'))).toMatchObject({ ok: true, lines: last.manifest.lines });
    const again = await app.request('GET', '/api/v1/export', admin());
    expect(again.text).toBe(r.text);
  });

  it('filters by range and dagId', async () => {
    const r = await app.request('GET', '/api/v1/export?from=2026-03-01T01:30:00Z&to=2026-03-02T00:00:00Z', admin());
    expect(r.status).toBe(200);
    const runs = r.text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, any>)
      .filter((x) => x.type === 'run');
    expect(runs.map((x) => x.dagId)).toEqual(['report']);
    const d = await app.request('GET', '/api/v1/export?dagId=ingest', admin());
    expect(d.text).toContain('"dagId":"ingest"');
    expect(d.text).not.toContain('"dagId":"report"');
  });

  it('answers a bad range with 400 and needs orchestrator:admin', async () => {
    for (const q of [
      'from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z',
      'from=not-a-date',
      'to=2026-02-30T99:00:00Z',
      'colour=red',
    ]) {
      const r = await app.request('GET', `/api/v1/export?${q}`, admin());
      expect(r.status).toBe(400);
    }
    const bad = await app.request('GET', '/api/v1/export?from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z', admin());
    expect(bad.body.error.code).toBe('INVALID_RANGE');
    const reader = await app.token(app.tenantId, ['orchestrator:read', 'orchestrator:write']);
    expect((await app.request('GET', '/api/v1/export', { as: { token: reader, tenantId: app.tenantId } })).status).toBe(
      403,
    );
    expect((await app.request('GET', '/api/v1/export')).status).toBe(401);
  });

  it('gives tenant B an export without any of tenant A records', async () => {
    const b = await app.tenant('export-b');
    const run = await insertRun(app.ordo.database.system, b.tenantId, 'ingest');
    await appendEvents(app.ordo.database.system, run, [{ type: 'run.created' }]);
    const r = await app.request('GET', '/api/v1/export', { as: { token: b.token, tenantId: b.tenantId } });
    expect(r.status).toBe(200);
    for (const id of runIdsA) expect(r.text).not.toContain(id);
    expect(r.text).toContain(run.runId);
    const last = split(r.text, path.join(tmp, 'b'));
    expect(last.manifest).toMatchObject({ tenant: b.tenantId, counts: { run: 1, event: 1 } });
    // A's token cannot export B (tenant header mismatch).
    expect(
      (await app.request('GET', '/api/v1/export', { as: { token: app.adminToken, tenantId: b.tenantId } })).status,
    ).toBe(403);
  });

  it('ordo export writes the same bytes as the API, and ordo export verify names the first bad line', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const io = {
      out: (s: string) => out.push(s),
      err: (s: string) => err.push(s),
      env: {
        DATABASE_URL: app.testDb.ownerUrl,
        ORDO_HOME: path.join(tmp, 'cli-home'),
        ORDO_SIGNING_KEYS_DIR: path.join(app.config.home, 'keys'),
        LOG_LEVEL: 'silent',
      },
    };
    const dir = path.join(tmp, 'cli');
    expect(await runCli(['export', '--out', dir, '--tenant', app.tenantId], io)).toBe(0);
    const http = await app.request('GET', '/api/v1/export', admin());
    const httpLines = http.text.split('\n').filter(Boolean);
    httpLines.pop();
    expect(fs.readFileSync(path.join(dir, NDJSON_FILE), 'utf8')).toBe(httpLines.map((l) => `${l}\n`).join(''));

    expect(await runCli(['export', 'verify', dir], io)).toBe(0);
    expect(out.join('')).toMatch(/OK: \d+ lines/);

    const file = path.join(dir, NDJSON_FILE);
    const text = fs.readFileSync(file, 'utf8');
    const third = text.split('\n').slice(0, 2).join('\n').length + 1;
    fs.writeFileSync(
      file,
      `${text.slice(0, third + 20)}${text[third + 20] === '0' ? '1' : '0'}${text.slice(third + 21)}`,
    );
    err.length = 0;
    expect(await runCli(['export', 'verify', dir], io)).toBe(1);
    expect(err.join('')).toMatch(/export\.ndjson line 3: /);

    expect(await runCli(['export', '--out', dir, '--from', 'tomorrow'], io)).toBe(1);
    expect(await runCli(['export'], io)).toBe(2);
  });
});
