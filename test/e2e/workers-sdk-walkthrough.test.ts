import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildPrivateDist } from '../support/dist';
import { startTestApp, type TestApp } from '../support/test-app';

const ROOT = path.join(__dirname, '../..');
/** The address the docs tell the reader Ordo listens on; the test app listens on a free port. */
const DOCS_URL = 'http://127.0.0.1:8080';

/** The fenced blocks between `<!-- workers-walkthrough:begin -->` and `<!-- workers-walkthrough:end -->`. */
function walkthroughBlocks(markdown: string): { lang: string; text: string }[] {
  const begin = markdown.indexOf('<!-- workers-walkthrough:begin -->');
  const end = markdown.indexOf('<!-- workers-walkthrough:end -->');
  if (begin < 0 || end < begin) throw new Error('docs/workers.md has no workers-walkthrough:begin/end section');
  return [...markdown.slice(begin, end).matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    lang: m[1],
    text: m[2],
  }));
}

/**
 * A directory laid out as a checkout in which `npm start` ran: examples/, node_modules, dist/ (this
 * jest run's compiled tree, with the example worker) and `.ordo` as the test app's home.
 */
function checkoutLike(app: TestApp, distDir: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-workers-walkthrough-'));
  for (const name of ['package.json', 'node_modules', 'examples']) {
    fs.symlinkSync(path.join(ROOT, name), path.join(dir, name));
  }
  fs.symlinkSync(distDir, path.join(dir, 'dist'));
  fs.symlinkSync(app.config.home, path.join(dir, '.ordo'));
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
    // The whole group goes: the script and the worker it started in the background.
    const timer = setTimeout(() => child.pid && process.kill(-child.pid, 'SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

/** The walkthrough of docs/workers.md, as written there, against Ordo with the api, worker and scheduler roles. */
describe('workers walkthrough (docs/workers.md)', () => {
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

  it('worker token → worker → publish → run → outputs → drain, verbatim', async () => {
    const blocks = walkthroughBlocks(fs.readFileSync(path.join(ROOT, 'docs', 'workers.md'), 'utf8'));
    const commands = blocks.filter((b) => b.lang === 'sh').map((b) => b.text);
    const expected = blocks.filter((b) => b.lang === 'text').map((b) => b.text.trim());
    expect(commands.length).toBeGreaterThanOrEqual(6);
    expect(expected).toHaveLength(1);
    expect(commands[0]).toContain(`API=${DOCS_URL}/api/v1`);
    const script = ['set -euo pipefail', ...commands].join('\n').replaceAll(DOCS_URL, app.url);

    const r = await bash(script, dir, 50_000);
    const log = () => {
      const file = path.join(dir, 'scratch', 'workers', 'resize-worker.log');
      return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '(no worker log)';
    };
    if (r.code !== 0) {
      throw new Error(
        `the walkthrough exited ${r.code}\n--- stdout\n${r.out}\n--- stderr\n${r.err}\n--- worker\n${log()}`,
      );
    }
    const lines = r.out.trim().split('\n');
    // The outputs printed are the ones the page shows; then the one result the worker posted.
    expect(JSON.parse(lines.at(-2)!)).toEqual(JSON.parse(expected[0]));
    expect(lines.at(-1)).toBe('1');

    // The worker drained on SIGTERM: it left, and its log ends with its stop.
    const events = log()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event: string; workerId?: string });
    expect(events.map((e) => e.event)).toEqual(['registered', 'transport', 'task', 'result', 'stopped']);
    const as = { token: app.adminToken, tenantId: app.tenantId };
    const w = await app.request('GET', `/api/v1/workers/${events[0].workerId}`, { as });
    expect(w.body).toMatchObject({ name: 'resize-1', pool: 'gpu', status: 'offline', sdkVersion: '0.1.0' });
  });
});
