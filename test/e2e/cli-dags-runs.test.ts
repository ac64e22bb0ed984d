import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { runCli } from '../../src/cli/main';
import { buildPrivateDist } from '../support/dist';
import { startTestApp, type TestApp } from '../support/test-app';

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Waits until `ready()` holds, checking every 20 ms; fails naming `what` after 20 s. */
async function until(ready: () => boolean, what: () => string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const OK_DAG = `id: cli-ok
description: two steps in a row
steps:
  - id: extract
    plugin: noop
    with: { output: { rows: 3 } }
  - id: load
    plugin: noop
    dependsOn: [extract]
`;

const FAIL_DAG = {
  id: 'cli-fail',
  steps: [
    { id: 'first', plugin: 'noop', with: { output: { n: 1 } } },
    { id: 'boom', plugin: 'noop', dependsOn: ['first'], with: { fail: true } },
  ],
};

const LONG_DAG = `id: cli-long
steps:
  - id: wait
    plugin: noop
    with: { sleepMs: 120000 }
`;

describe('ordo dags and runs over the API', () => {
  let app: TestApp;
  let dist: ReturnType<typeof buildPrivateDist>;
  let dir: string;
  let tokenB: string;

  /** Runs `ordo …` in this process as tenant "default" (its admin token), or with the given token. */
  const ordo = async (args: string[], token = app.adminToken): Promise<Result> => {
    let stdout = '';
    let stderr = '';
    const code = await runCli(args, {
      out: (t) => (stdout += t),
      err: (t) => (stderr += t),
      env: { ORDO_URL: app.url, ORDO_TOKEN: token },
    });
    return { code, stdout, stderr };
  };

  /** Runs the compiled `ordo` as a process: its exit status is the process's. */
  const ordoProcess = (args: string[]): Promise<Result> =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [dist.cli, ...args], {
        env: { PATH: process.env.PATH, ORDO_URL: app.url, ORDO_TOKEN: app.adminToken },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });

  beforeAll(async () => {
    dist = buildPrivateDist();
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    ({ token: tokenB } = await app.tenant('cli-tenant-b'));
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-cli-dags-runs-'));
    fs.writeFileSync(path.join(dir, 'ok.yaml'), OK_DAG);
    fs.writeFileSync(path.join(dir, 'fail.json'), JSON.stringify(FAIL_DAG));
    fs.writeFileSync(path.join(dir, 'long.yml'), LONG_DAG);
  });
  afterAll(async () => {
    // The worker's job runner ends its own pool after shutdown; give it a moment before the
    // test database is dropped (a forced drop would fail its still-open connections).
    await app?.ordo.close();
    await new Promise((r) => setTimeout(r, 1000));
    await app?.close();
    dist?.remove();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('publishes YAML and JSON files, lists, gets and graphs the DAG', async () => {
    const pub = await ordo(['dags', 'publish', path.join(dir, 'ok.yaml')]);
    expect(pub).toMatchObject({ code: 0, stderr: '' });
    expect(pub.stdout).toMatch(/^published cli-ok version 1 \(active, content [0-9a-f]{12}\)\n$/);
    const again = await ordo(['dags', 'publish', path.join(dir, 'ok.yaml'), '-o', 'json']);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ dagId: 'cli-ok', version: 1, created: false });
    expect((await ordo(['dags', 'publish', path.join(dir, 'fail.json')])).code).toBe(0);
    expect((await ordo(['dags', 'publish', path.join(dir, 'long.yml')])).code).toBe(0);

    const list = await ordo(['dags', 'list']);
    expect(list.code).toBe(0);
    const rows = list.stdout.trim().split('\n');
    expect(rows[0]).toMatch(/^DAG\s+VERSION\s+STATUS\s+FORMAT\s+OWNER\s+CREATED$/);
    expect(rows.slice(1).map((r) => r.split(/\s+/).slice(0, 4))).toEqual([
      ['cli-fail', '1', 'active', 'json'],
      ['cli-long', '1', 'active', 'yaml'],
      ['cli-ok', '1', 'active', 'yaml'],
    ]);

    const get = await ordo(['dags', 'get', 'cli-ok', '--output', 'json']);
    expect(get.code).toBe(0);
    const version = JSON.parse(get.stdout);
    expect(version).toMatchObject({ dagId: 'cli-ok', version: 1, sourceFormat: 'yaml' });
    expect(version.definition.steps.map((s: { id: string }) => s.id)).toEqual(['extract', 'load']);

    const graph = await ordo(['dags', 'graph', 'cli-ok']);
    expect(graph.code).toBe(0);
    const lines = graph.stdout.trim().split('\n');
    expect(lines[0]).toBe('cli-ok version 1: 2 steps, 1 edges');
    expect(lines.slice(2).map((l) => l.split(/\s+/).slice(0, 3))).toEqual([
      ['extract', 'noop', '-'],
      ['load', 'noop', 'extract'],
    ]);
    const dot = await ordo(['dags', 'graph', 'cli-ok', '--version', '1', '--format', 'dot']);
    expect(dot.code).toBe(0);
    expect(dot.stdout).toMatch(/^digraph/);
    expect(dot.stdout).toMatch(/"extract"\s*->\s*"load"/);
  });

  it('starts a run and watches it to success: exit 0, each step reported (the compiled CLI as a process)', async () => {
    const r = await ordoProcess(['runs', 'start', 'cli-ok', '--watch', '--timeout', '40s']);
    expect(r.stderr).toMatch(/^run [0-9a-f-]{36} started\n/);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/step extract \(attempt 1\): succeeded/);
    expect(r.stdout).toMatch(/step load \(attempt 1\): succeeded/);
    expect(r.stdout).toMatch(/\nrun [0-9a-f-]{36} succeeded in \d+\.\d s\n$/);

    const list = await ordo(['runs', 'list', '--dag', 'cli-ok', '-o', 'json']);
    expect(list.code).toBe(0);
    const page = JSON.parse(list.stdout);
    expect(page.items).toHaveLength(1);
    expect(page.items[0]).toMatchObject({ dagId: 'cli-ok', status: 'succeeded', stepsRemaining: 0 });
    const table = await ordo(['runs', 'list', '--status', 'succeeded']);
    expect(table.stdout).toContain(page.items[0].runId);

    // A finished run: watch answers at once with its outcome.
    const again = await ordo(['runs', 'watch', page.items[0].runId]);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/succeeded/);
  });

  it('watches a failing run to exit 3 with the failed step, and reruns it from that step', async () => {
    const start = await ordo(['runs', 'start', 'cli-fail', '--input', 'why=test', '--run-token', 'fail-1']);
    expect(start.code).toBe(0);
    const runId = start.stdout.trim();
    expect(runId).toMatch(/^[0-9a-f-]{36}$/);
    const w = await ordo(['runs', 'watch', runId, '--timeout', '40s']);
    expect(w.code).toBe(3);
    expect(w.stdout).toMatch(new RegExp(`run ${runId} failed`));
    expect(w.stdout).toMatch(/step boom failed: NOOP_FAIL/);

    const get = await ordo(['runs', 'get', runId]);
    expect(get.code).toBe(0);
    expect(get.stdout).toMatch(/^run .*: cli-fail v1 failed/);
    expect(get.stdout).toMatch(/\nboom\s+noop\s+failed\s+1\s/);

    const rerun = await ordo(['runs', 'rerun', runId, '--from', 'boom', '--watch', '-o', 'json']);
    expect(rerun.code).toBe(3);
    const lines = rerun.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const last = lines[lines.length - 1];
    expect(last.type).toBe('run');
    expect(last.run).toMatchObject({ rerunOf: runId, rerunFromStep: 'boom', status: 'failed' });
    const first = last.run.steps.find((s: { stepId: string }) => s.stepId === 'first');
    expect(first).toMatchObject({ status: 'succeeded', fromRerun: true });
    expect(lines.slice(0, -1).every((l) => l.type === 'event' && l.runId === last.run.runId)).toBe(true);

    const notFailed = await ordo(['runs', 'rerun', last.run.runId, '--from', 'nope']);
    expect(notFailed.code).toBe(1);
    expect(notFailed.stderr).toMatch(/\(STEP_NOT_FOUND|VALIDATION_FAILED|RUN_NOT_FAILED/);
  });

  it('cancels a long run: watch exits 4; a watch with a short --timeout exits 5 first; a finished run is not cancelled', async () => {
    const start = await ordo(['runs', 'start', 'cli-long']);
    const runId = start.stdout.trim();
    const timedOut = await ordo(['runs', 'watch', runId, '--timeout', '1s']);
    expect(timedOut.code).toBe(5);
    expect(timedOut.stderr).toMatch(/has not ended within --timeout/);

    // A watch that is following the run live: the cancel comes after its subscription (its
    // progress from the ledger is printed once the subscription is active), so it arrives on the stream.
    let watched = '';
    const watching = runCli(['runs', 'watch', runId], {
      out: (t) => (watched += t),
      err: () => undefined,
      env: { ORDO_URL: app.url, ORDO_TOKEN: app.adminToken },
    });
    await until(
      () => watched.includes('[run.created]'),
      () => `the watch's first progress line: ${watched}`,
    );
    const cancel = await ordo(['runs', 'cancel', runId]);
    expect(cancel).toMatchObject({ code: 0, stdout: `run ${runId} cancelled\n` });
    expect(await watching).toBe(4);
    expect(watched).toMatch(/run: cancelled {2}\[run\.cancelled\]\n/);
    expect(watched).toMatch(new RegExp(`\nrun ${runId} cancelled`));
    const w = await ordo(['runs', 'watch', runId]);
    expect(w.code).toBe(4);
    // Cancelling is idempotent; a run that ended otherwise cannot be cancelled.
    expect(await ordo(['runs', 'cancel', runId])).toMatchObject({ code: 0, stdout: `run ${runId} cancelled\n` });
    const done = await ordo(['runs', 'start', 'cli-ok', '--watch', '-o', 'json']);
    expect(done.code).toBe(0);
    const ended = JSON.parse(done.stdout.trim().split('\n').pop()!);
    const late = await ordo(['runs', 'cancel', ended.run.runId]);
    expect(late.code).toBe(1);
    expect(late.stderr).toMatch(/\(RUN_FINISHED, HTTP 409/);
  });

  it('resumes a watch from its cursor when the connection drops, through the second of two addresses', async () => {
    // A TCP relay in front of the API whose connections the test cuts; the first address refuses.
    const sockets = new Set<net.Socket>();
    const target = new URL(app.url);
    const relay = net.createServer((client) => {
      const upstream = net.connect(Number(target.port), target.hostname);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('error', () => undefined);
        s.on('close', () => sockets.delete(s));
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const refused = `http://127.0.0.1:${(closed.address() as net.AddressInfo).port}`;
    await new Promise((r) => closed.close(r));
    const via = `${refused},http://127.0.0.1:${(relay.address() as net.AddressInfo).port}`;
    try {
      const runId = (await ordo(['runs', 'start', 'cli-long'])).stdout.trim();
      let out = '';
      let err = '';
      const watching = runCli(['runs', 'watch', runId, '--url', via, '-o', 'json'], {
        out: (t) => (out += t),
        err: (t) => (err += t),
        env: { ORDO_TOKEN: app.adminToken },
      });
      await until(
        () => out.includes('"run.created"'),
        () => `the watch's first event: ${out} ${err}`,
      );
      for (const s of sockets) s.destroy();
      await until(
        () => err.includes('stream disconnected'),
        () => `the watch to see the connection drop: ${out} ${err}`,
      );
      expect((await ordo(['runs', 'cancel', runId])).code).toBe(0);
      expect(await watching).toBe(4);
      // Every event once, in order, across the two connections, up to the run's end.
      const lines = out
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const events = lines.slice(0, -1);
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
      expect(events.find((e) => e.eventType === 'run.cancelled')).toMatchObject({ status: 'cancelled' });
      expect(lines[lines.length - 1]).toMatchObject({ type: 'run', run: { runId, status: 'cancelled' } });
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => relay.close(r));
    }
  });

  it("does not show tenant A's run or DAG to tenant B's token: 404 with the resource's code", async () => {
    const start = await ordo(['runs', 'start', 'cli-ok']);
    const runId = start.stdout.trim();
    const get = await ordo(['runs', 'get', runId], tokenB);
    expect(get.code).toBe(1);
    expect(get.stdout).toBe('');
    expect(get.stderr).toMatch(/^ordo runs: .*\(RUN_NOT_FOUND, HTTP 404, trace [0-9a-f]+\)\n$/);
    const watch = await ordo(['runs', 'watch', runId], tokenB);
    expect(watch.code).toBe(1);
    expect(watch.stderr).toMatch(/RUN_NOT_FOUND, HTTP 404/);
    const cancel = await ordo(['runs', 'cancel', runId], tokenB);
    expect(cancel.stderr).toMatch(/RUN_NOT_FOUND, HTTP 404/);
    const dag = await ordo(['dags', 'get', 'cli-ok'], tokenB);
    expect(dag.stderr).toMatch(/DAG_NOT_FOUND, HTTP 404/);
    const list = await ordo(['runs', 'list', '-o', 'json'], tokenB);
    expect(JSON.parse(list.stdout).items).toEqual([]);
  });

  it('exits 2 with a message for usage errors, and 1 with the code for a refused token', async () => {
    const cases: [string[], RegExp][] = [
      [['runs', 'get'], /missing argument <runId>/],
      [['runs', 'frobnicate'], /unknown subcommand "frobnicate"/],
      [['runs', 'rerun', '00000000-0000-4000-8000-000000000000'], /missing --from/],
      [['runs', 'list', '--status', 'done'], /--status must be one of/],
      [['runs', 'start', 'cli-ok', '--inputs', '[1]'], /--inputs must be a JSON object/],
      [['dags', 'list', '--output', 'yaml'], /--output must be table or json/],
      [['dags', 'graph', 'cli-ok', '--format', 'png'], /--format must be text or dot/],
      [['dags', 'publish', path.join(os.tmpdir(), 'no-such-dag.yaml')], /cannot read/],
    ];
    for (const [args, message] of cases) {
      const r = await ordo(args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr).toMatch(message);
    }
    let stderr = '';
    const noToken = await runCli(['runs', 'list'], { out: () => undefined, err: (t) => (stderr += t), env: {} });
    expect(noToken).toBe(2);
    expect(stderr).toMatch(/no token: pass --token or set ORDO_TOKEN/);
    const bad = await ordo(['runs', 'list'], 'not-a-token');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/\(INVALID_TOKEN, HTTP 401/);
  });
});
