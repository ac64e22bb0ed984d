import { execFile, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startTestApp, type TestApp } from '../support/test-app';
import { waitForRun } from './runs-support';
import { mintWorkerToken, publishDagJson, startChildWorker, startRun } from './workers-sdk-support';

const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '..', '..');

interface Packed {
  name: string;
  files: string[];
  tarball: string;
}

/** A compiled file of no source, left in the staged copy's dist/ before it is packed. */
const LEFT_OVER = 'left-over';

/**
 * Packs `sdk/<folder>` as `npm publish` would, its `prepack` script building it: from a copy beside
 * a copy of the project's tsconfig.json (which the package's extends), inside the project so the
 * build finds the project's compiler and types, and without writing into the tree.
 */
async function pack(folder: string, out: string): Promise<Packed> {
  fs.mkdirSync(path.join(ROOT, '.ordo-test'), { recursive: true });
  const stage = fs.mkdtempSync(path.join(ROOT, '.ordo-test', 'pack-'));
  try {
    fs.copyFileSync(path.join(ROOT, 'tsconfig.json'), path.join(stage, 'tsconfig.json'));
    const dir = path.join(stage, 'sdk', folder);
    fs.cpSync(path.join(ROOT, 'sdk', folder), dir, {
      recursive: true,
      filter: (src) => !['dist', 'node_modules'].includes(path.basename(src)),
    });
    // What an earlier build left of a source since removed: the pack's build starts clean.
    fs.mkdirSync(path.join(dir, 'dist'));
    fs.writeFileSync(path.join(dir, 'dist', `${LEFT_OVER}.js`), 'module.exports = {};\n');
    fs.writeFileSync(path.join(dir, 'dist', `${LEFT_OVER}.d.ts`), 'export {};\n');
    // Only what a shell gives npm: the variables `npm test` sets for its own script stay out.
    const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', out], {
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: process.env.HOME ?? os.homedir() },
    });
    const [info] = JSON.parse(stdout) as { name: string; filename: string; files: { path: string }[] }[];
    return { name: info.name, files: info.files.map((f) => f.path).sort(), tarball: path.join(out, info.filename) };
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

/**
 * Installs a packed package into `project` (outside the project's tree, so nothing resolves from its
 * node_modules by accident): unpacked into node_modules, its declared dependencies linked from the
 * project's installed copies. Answers the package's folder.
 */
async function install(p: Packed, project: string): Promise<string> {
  const dir = path.join(project, 'node_modules', ...p.name.split('/'));
  fs.mkdirSync(dir, { recursive: true });
  await run('tar', ['-xzf', p.tarball, '-C', dir, '--strip-components=1']);
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
  };
  for (const dep of Object.keys(manifest.dependencies ?? {})) link(project, dep);
  return dir;
}

function link(project: string, name: string): void {
  const to = path.join(project, 'node_modules', ...name.split('/'));
  fs.mkdirSync(path.dirname(to), { recursive: true });
  if (!fs.existsSync(to)) fs.symlinkSync(path.join(ROOT, 'node_modules', ...name.split('/')), to, 'dir');
}

/** A consumer's code against both packages' declarations; the @ts-expect-error lines fail to compile unless the types are precise. */
const CONSUMER_TS = `
import { OrdoWorker, TaskError, type TaskContext } from '@ordo/worker-sdk';
import { createOrdoClient, OrdoApiError, unwrap } from '@ordo/client';

const worker = new OrdoWorker({ urls: ['http://127.0.0.1:9'], token: 't', tenantId: 'acme', name: 'typed', maxConcurrent: 2 });
worker.handle('resize-image', {
  input: { type: 'object', required: ['width'], properties: { width: { type: 'integer' } } },
  async run(input: unknown, ctx: TaskContext) {
    ctx.progress(50, 'half way');
    if (ctx.signal.aborted) throw new TaskError('transient', 'ABORTED', 'stopped');
    return { width: (input as { width: number }).width };
  },
});

const ordo = createOrdoClient({ baseUrl: 'http://127.0.0.1:9', token: 't', tenantId: 'acme' });
export async function status(runId: string): Promise<string> {
  const r = await unwrap(ordo.api.GET('/api/v1/runs/{runId}', { params: { path: { runId } } }));
  return r.status;
}
export const isApiError = (e: unknown): e is OrdoApiError => e instanceof OrdoApiError;

// @ts-expect-error the route's runId is required
void ordo.api.GET('/api/v1/runs/{runId}', { params: { path: {} } });
// @ts-expect-error no such route
void ordo.api.GET('/api/v1/no-such-route');
// @ts-expect-error maxConcurrent is a number
new OrdoWorker({ urls: 'x', token: 't', tenantId: 'a', name: 'n', maxConcurrent: 'two' });
`;

/** Reads a run through the packed client, as a program of the consumer's (plain Node, CommonJS). */
const CONSUMER_CLIENT_JS = `
const { createOrdoClient, unwrap } = require('@ordo/client');
const [url, token, tenantId, runId] = process.argv.slice(2);
const ordo = createOrdoClient({ baseUrl: url, token, tenantId });
unwrap(ordo.api.GET('/api/v1/runs/{runId}', { params: { path: { runId } } })).then(
  (r) => console.log(JSON.stringify({ status: r.status, steps: r.steps.map((s) => ({ stepId: s.stepId, outputs: s.outputs })) })),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
`;

/**
 * The SDKs as their users get them: `npm pack` of sdk/worker and sdk/client (what `npm publish`
 * uploads), installed into a project of its own, type-checked against their declarations and run
 * against a real Ordo: the packed worker SDK runs a queue step, the packed client reads its run.
 */
describe('SDK packages (npm pack, installed elsewhere)', () => {
  let app: TestApp;
  let project: string;
  let worker: Packed;
  let client: Packed;
  /** The installed worker SDK's folder. */
  let sdk: string;
  const started: ChildProcess[] = [];

  beforeAll(async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-sdk-packs-'));
    [worker, client] = await Promise.all([pack('worker', out), pack('client', out)]);
    project = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-sdk-consumer-'));
    fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
    sdk = await install(worker, project);
    await install(client, project);
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
  });
  afterAll(async () => {
    for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await app?.close();
    if (project) fs.rmSync(project, { recursive: true, force: true });
    if (worker) fs.rmSync(path.dirname(worker.tarball), { recursive: true, force: true });
  });

  it('packs each SDK with its compiled code and declarations, entry points included', () => {
    for (const p of [worker, client]) {
      expect(p.files).toEqual(
        expect.arrayContaining(['README.md', 'package.json', 'dist/index.js', 'dist/index.d.ts']),
      );
      // Compiled code only: no sources, tests or specs.
      expect(p.files.filter((f) => !/^(README\.md|package\.json|dist\/[\w.-]+\.(js|d\.ts))$/.test(f))).toEqual([]);
      expect(p.files.some((f) => f.includes('.spec.'))).toBe(false);
      expect(p.files.filter((f) => f.includes(LEFT_OVER))).toEqual([]);
    }
    expect(worker.name).toBe('@ordo/worker-sdk');
    expect(client.name).toBe('@ordo/client');
  });

  it("type-checks a consumer's code against the packed declarations", async () => {
    link(project, '@types/node');
    fs.writeFileSync(path.join(project, 'consumer.ts'), CONSUMER_TS);
    const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const args = [
      '--noEmit',
      '--strict',
      '--target',
      'es2023',
      '--module',
      'nodenext',
      '--types',
      'node',
      'consumer.ts',
    ];
    const checked = await run(process.execPath, [tsc, ...args], { cwd: project }).then(
      () => '',
      (e: Error & { stdout?: string }) => e.stdout || e.message,
    );
    expect(checked).toBe('');
  }, 120_000);

  it('runs a queue step on a worker of the packed SDK, and reads its run through the packed client', async () => {
    const as = { token: app.adminToken, tenantId: app.tenantId };
    await publishDagJson(app, as, {
      id: 'packed-echo',
      steps: [
        {
          id: 'work',
          plugin: 'queue',
          timeout: '2m',
          with: { taskType: 'echo', pool: 'packed', inputs: { value: 'hi' } },
        },
      ],
    });
    const token = await mintWorkerToken(app, as, 'packed', 'packed-1');
    const w = startChildWorker(
      { url: app.url, token, tenantId: as.tenantId, name: 'packed-1', pool: 'packed', sdk },
      started,
    );
    await w.waitFor((e) => e.event === 'registered', 'its registration');
    const runId = await startRun(app, as, 'packed-echo', {}, 'packed-1');
    expect((await waitForRun(app, as, runId, 60_000)).status).toBe('succeeded');

    fs.writeFileSync(path.join(project, 'read-run.js'), CONSUMER_CLIENT_JS);
    const { stdout } = await run(process.execPath, ['read-run.js', app.url, as.token, as.tenantId, runId], {
      cwd: project,
      env: { PATH: process.env.PATH },
    });
    expect(JSON.parse(stdout)).toEqual({
      status: 'succeeded',
      steps: [{ stepId: 'work', outputs: { value: 'hi', worker: 'packed-1' } }],
    });
    w.signal('SIGTERM');
    expect(await w.exited).toEqual({ code: 0, signal: null });
  }, 120_000);
});
