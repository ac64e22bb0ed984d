import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildPrivateDist } from '../support/dist';
import { startTestApp, type TestApp } from '../support/test-app';

const ROOT = path.join(__dirname, '../..');
/** The address the README tells the reader Ordo listens on; the test app listens on a free port. */
const README_URL = 'http://127.0.0.1:8080';

/** The fenced blocks (info string → text) between `<!-- hello-world:begin -->` and `<!-- hello-world:end -->`. */
function helloWorldBlocks(markdown: string): { lang: string; text: string }[] {
  const begin = markdown.indexOf('<!-- hello-world:begin -->');
  const end = markdown.indexOf('<!-- hello-world:end -->');
  if (begin < 0 || end < begin) throw new Error('README.md has no hello-world:begin/end section');
  const section = markdown.slice(begin, end);
  return [...section.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({ lang: m[1], text: m[2] }));
}

/**
 * A directory laid out as a checkout in which `npm start` ran: the project's package.json, scripts
 * and node_modules, its `bin/ordo.js` running the compiled tree of this jest run, and `.ordo` as
 * the test app's home (first-start credentials, signing keys). The README's commands run there
 * verbatim, so `npx ordo` and `./.ordo/admin-credentials.json` resolve as they do for a reader.
 */
function checkoutLike(app: TestApp, distDir: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-readme-'));
  fs.symlinkSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  fs.symlinkSync(path.join(ROOT, 'scripts'), path.join(dir, 'scripts'));
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

describe("README's hello world", () => {
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

  it('runs verbatim: publishes (JSON, then YAML as the same version), runs to success, exports and verifies', async () => {
    const blocks = helloWorldBlocks(fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8'));
    const commands = blocks.filter((b) => b.lang === 'sh').map((b) => b.text);
    const expected = blocks.filter((b) => b.lang === 'json').map((b) => b.text.trim());
    expect(commands.length).toBeGreaterThanOrEqual(6);
    expect(expected).toHaveLength(1);
    // The reader's Ordo listens on the README's address; this one on the test app's.
    expect(commands[0]).toContain(`API=${README_URL}/api/v1`);
    const script = ['set -euo pipefail', ...commands].join('\n').replaceAll(README_URL, app.url);

    const r = await bash(script, dir, 150_000);
    if (r.code !== 0) throw new Error(`the hello world exited ${r.code}\n--- stdout\n${r.out}\n--- stderr\n${r.err}`);

    // The JSON publish created version 1; the YAML publish of the same content found it.
    const created = [...r.out.matchAll(/"created":(true|false)/g)].map((m) => m[1]);
    expect(created).toEqual(['true', 'false']);
    // The outputs printed are the ones the README shows.
    expect(r.out).toContain(expected[0]);
    // The export verified against the pinned key.
    expect(r.out).toMatch(/^OK: \d+ lines \(.*\), signed by key \S+$/m);

    const as = { token: app.adminToken, tenantId: app.tenantId };
    const runs = await app.request('GET', '/api/v1/runs?dagId=hello', { as });
    expect(runs.body.items.map((x: { status: string }) => x.status)).toEqual(['succeeded']);
    const versions = await app.request('GET', '/api/v1/dags?dagId=hello', { as });
    expect(versions.body.items).toHaveLength(1);
    const exported = fs
      .readFileSync(path.join(dir, 'scratch', 'export.ndjson'), 'utf8')
      .trim()
      .split('\n');
    expect(JSON.parse(exported[exported.length - 1]).type).toBe('manifest');
  }, 240_000);
});

describe('command blocks in README.md and docs/', () => {
  /** Sections whose blocks a test runs as written (this file, bundles-walkthrough.test.ts, workers-sdk-walkthrough.test.ts). */
  const TESTED = ['hello-world', 'bundles-walkthrough', 'workers-walkthrough'];

  it('are each run by a test or marked illustrative', () => {
    const files = ['README.md', ...fs.readdirSync(path.join(ROOT, 'docs')).map((f) => `docs/${f}`)].filter((f) =>
      f.endsWith('.md'),
    );
    const unmarked: string[] = [];
    for (const file of files) {
      const lines = fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n');
      let tested: string | undefined;
      let inBlock = false;
      lines.forEach((line, i) => {
        const section = /^<!-- ([\w-]+):(begin|end) -->$/.exec(line);
        if (section && TESTED.includes(section[1])) tested = section[2] === 'begin' ? section[1] : undefined;
        if (!line.startsWith('```')) return;
        if (inBlock) {
          inBlock = false;
          return;
        }
        inBlock = true;
        if (!/^```(sh|bash|shell|console)\s*$/.test(line) || tested) return;
        const before = lines.slice(0, i).filter((l) => l.trim() !== '');
        if (before[before.length - 1] !== '<!-- illustrative -->') unmarked.push(`${file}:${i + 1}`);
      });
    }
    expect(unmarked).toEqual([]);
  });
});
