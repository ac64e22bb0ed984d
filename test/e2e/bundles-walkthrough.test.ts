import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildPrivateDist } from '../support/dist';
import { startTestApp, type TestApp } from '../support/test-app';
import { waitForRun } from './runs-support';

const ROOT = path.join(__dirname, '../..');
/** The address the docs tell the reader Ordo listens on; the test app listens on a free port. */
const DOCS_URL = 'http://127.0.0.1:8080';

/** The fenced blocks between `<!-- bundles-walkthrough:begin -->` and `<!-- bundles-walkthrough:end -->`. */
function walkthroughBlocks(markdown: string): { lang: string; text: string }[] {
  const begin = markdown.indexOf('<!-- bundles-walkthrough:begin -->');
  const end = markdown.indexOf('<!-- bundles-walkthrough:end -->');
  if (begin < 0 || end < begin) throw new Error('docs/bundles.md has no bundles-walkthrough:begin/end section');
  return [...markdown.slice(begin, end).matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    lang: m[1],
    text: m[2],
  }));
}

/**
 * A directory laid out as a checkout in which `npm start` ran (package.json, scripts, node_modules,
 * bundles/, a bin/ordo.js running this jest run's compiled tree, and `.ordo` as the test app's
 * home), so the walkthrough's commands run there verbatim.
 */
function checkoutLike(app: TestApp, distDir: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-walkthrough-'));
  for (const name of ['package.json', 'node_modules', 'scripts', 'bundles']) {
    fs.symlinkSync(path.join(ROOT, name), path.join(dir, name));
  }
  fs.symlinkSync(distDir, path.join(dir, 'dist'));
  fs.symlinkSync(app.config.home, path.join(dir, '.ordo'));
  fs.mkdirSync(path.join(dir, 'bin'));
  // A copy, not a link: bin/ordo.js finds dist/ beside its own directory.
  fs.copyFileSync(path.join(ROOT, 'bin', 'ordo.js'), path.join(dir, 'bin', 'ordo.js'));
  return dir;
}

function bash(
  script: string,
  cwd: string,
  timeoutMs: number,
): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script], {
      cwd,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, LANG: 'C.UTF-8' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.pid && process.kill(-child.pid, 'SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

/** The walkthrough of docs/bundles.md, as written there, with the api, worker and scheduler roles. */
describe('bundles walkthrough (docs/bundles.md)', () => {
  let app: TestApp;
  let dir: string;
  beforeAll(async () => {
    const dist = buildPrivateDist();
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    dir = checkoutLike(app, dist.dir);
  });
  afterAll(async () => {
    await app?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('keygen → pack → sign → verify → trust → import → run → outputs, verbatim', async () => {
    const blocks = walkthroughBlocks(fs.readFileSync(path.join(ROOT, 'docs', 'bundles.md'), 'utf8'));
    const commands = blocks.filter((b) => b.lang === 'sh').map((b) => b.text);
    const expected = blocks.filter((b) => b.lang === 'text').map((b) => b.text.trim());
    expect(commands.length).toBeGreaterThanOrEqual(6);
    expect(expected).toHaveLength(1);
    expect(commands[0]).toContain(`API=${DOCS_URL}/api/v1`);
    // The walkthrough makes a key of its own rather than reusing the example key's kid.
    expect(commands.join('\n')).not.toContain('--kid example-only');
    const script = ['set -euo pipefail', ...commands].join('\n').replaceAll(DOCS_URL, app.url);

    const r = await bash(script, dir, 150_000);
    if (r.code !== 0) throw new Error(`the walkthrough exited ${r.code}\n--- stdout\n${r.out}\n--- stderr\n${r.err}`);
    expect(r.out).toContain(expected[0]);
    expect(r.out).toContain('"imported":true');
    // Everything it wrote is under the ignored scratch folder.
    expect(fs.readdirSync(path.join(dir, 'scratch', 'bundles')).sort()).toEqual([
      'example.tar.gz',
      'example.tar.gz.sig',
      'keys',
    ]);

    const as = { token: app.adminToken, tenantId: app.tenantId };
    const dag = await app.request('GET', '/api/v1/dags/example-hello', { as });
    expect(dag.body.signature).toEqual({
      kid: 'my-publisher-1',
      signer: 'example-publisher',
      alg: 'EdDSA',
      source: 'bundle',
    });
    // The bundle's other DAG runs too.
    const hello = await app.request('POST', '/api/v1/runs', { as, body: { dagId: 'example-hello', runToken: 'walk' } });
    expect(hello.status).toBe(201);
    const helloRun = await waitForRun(app, as, hello.body.runId as string);
    expect(helloRun.status).toBe('succeeded');
    const outputs = new Map(
      (helloRun.steps as { stepId: string; outputs: unknown }[]).map((s) => [s.stepId, s.outputs]),
    );
    expect(outputs.get('first')).toEqual({ message: 'hello from a signed bundle' });
    expect(outputs.get('second')).toEqual({ done: true });
  }, 240_000);
});
