import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { startTestApp, type TestApp } from '../support/test-app';
import { waitForRun } from './runs-support';

/**
 * A hostile tenant admin against a running instance (api + worker), through the real routes: a
 * `cli` step that reads the instance's credentials and keys from ORDO_HOME, or connects to its
 * PostgreSQL, fails, and nothing it printed holds a secret of the instance or another tenant.
 */
describe('a tenant cli step against the instance', () => {
  let app: TestApp;
  let hostile: { token: string; tenantId: string };
  let secrets: string[];
  let dbPort = 0;

  beforeAll(async () => {
    // The operator lists no private range: nothing on loopback is reachable from any step.
    app = await startTestApp({ ORDO_ROLES: 'api,worker', ORDO_EGRESS_ALLOW_PRIVATE: '' });
    hostile = await app.tenant('hostile');
    const creds = JSON.parse(fs.readFileSync(path.join(app.config.home, 'admin-credentials.json'), 'utf8')) as Record<
      string,
      string
    >;
    secrets = [app.platformToken, app.adminToken, creds.platformToken];
    dbPort = Number(new URL(app.testDb.ownerUrl).port || 5432);
  });
  afterAll(async () => app.close());

  const runCli = async (id: string, args: string[], egress: string[] = []) => {
    const dag = { id, steps: [{ id: 'p', plugin: 'cli', egress, with: { command: '/bin/bash', args } }] };
    const published = await app.request('POST', '/api/v1/dags', { as: hostile, body: dag });
    expect(published.status).toBe(201);
    const started = await app.request('POST', '/api/v1/runs', {
      as: hostile,
      body: { dagId: id, inputs: {}, runToken: `${id}-1` },
    });
    expect(started.status).toBe(201);
    const run = await waitForRun(app, hostile, started.body.runId as string, 30_000);
    const attempts = await app.request('GET', `/api/v1/runs/${run.runId as string}/steps/p/attempts`, {
      as: hostile,
    });
    return { run, everything: JSON.stringify([run, attempts.body]) };
  };

  it('cannot read the first-start credentials, the signing keys or the secrets key from ORDO_HOME', async () => {
    const files = [
      'admin-credentials.json',
      'keys/signing-keys.json',
      'keys/secrets-key.json',
      'pg/credentials.json',
    ].map((f) => path.join(app.config.home, f));
    const { run, everything } = await runCli('steal-home', ['-c', `cat ${files.join(' ')}`]);
    expect(run.status).toBe('failed');
    expect(run.steps[0]).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
    expect(everything).toContain('No such file or directory');
    for (const s of secrets) expect(everything).not.toContain(s);
  });

  it("cannot connect to the instance's PostgreSQL, with no egress or with an entry naming another host", async () => {
    const probe = `exec 3<>/dev/tcp/127.0.0.1/${dbPort} && echo connected`;
    for (const [id, egress] of [
      ['pg-none', []],
      ['pg-other', ['example.com']],
    ] as const) {
      const { run, everything } = await runCli(id, ['-c', probe], [...egress]);
      expect(run.status).toBe('failed');
      expect(everything).not.toContain('connected');
    }
    // Through the step's proxy, named by its literal: refused, since the operator lists no private range.
    const tunnel = `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT 127.0.0.1:${dbPort} HTTP/1.1\\r\\n\\r\\n' >&3 && head -1 <&3`;
    const { run } = await runCli('pg-literal', ['-c', tunnel], [`127.0.0.1:${dbPort}`]);
    expect(run.steps[0].outputs.stdout).toMatch(/^HTTP\/1\.1 403 Forbidden/);
    // The database is there, for whoever may reach it: the instance itself.
    const c = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await c.connect();
    await c.end();
  });
});
