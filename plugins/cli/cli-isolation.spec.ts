import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { projectRoot } from '../../src/core/home/project-root';
import type { PluginResult } from '../../src/modules/plugins/plugin';
import { SANDBOX_UID } from '../../src/modules/sandbox/bwrap';
import {
  closeTestSandboxes,
  pluginContext,
  testSandbox,
  type TestContext,
} from '../../src/modules/sandbox/testing/plugin-context';
import plugin from './index';

/**
 * What a hostile tenant's `cli` step tries against the instance, each of which must fail: the
 * instance's files (ORDO_HOME's credentials and keys, the project, /etc/shadow), the host's
 * processes and environment, another step's files, writes outside its own directories, the
 * instance's services on loopback (with and without an egress entry), a private address behind a
 * permitted name, a process left running, and privileges (uid, capabilities, user namespaces).
 */
describe('cli sandbox boundaries', () => {
  const marker = `host-secret-${process.pid}-${Date.now()}`;
  let home: string;
  let service: net.Server;
  let servicePort = 0;

  const bash = (script: string, ctx: TestContext = pluginContext(), extra: Record<string, unknown> = {}) =>
    plugin.execute(plugin.configSchema.parse({ command: '/bin/bash', args: ['-c', script], ...extra }), ctx);
  const stdout = (r: PluginResult) => (typeof r.outputs?.stdout === 'string' ? r.outputs.stdout : '');

  beforeAll(async () => {
    process.env.ORDO_ISOLATION_MARKER = marker;
    // An ORDO_HOME as the first start leaves it: credentials, keys, a secrets key (0600, owner only).
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-home-'));
    fs.chmodSync(home, 0o755);
    fs.mkdirSync(path.join(home, 'keys'), { mode: 0o700 });
    for (const f of ['admin-credentials.json', 'keys/signing-keys.json', 'secrets-key.json'])
      fs.writeFileSync(path.join(home, f), JSON.stringify({ platformToken: marker }), { mode: 0o600 });
    // Stands in for the instance's PostgreSQL, Redis or API on loopback.
    service = net.createServer((s) => s.end(`${marker}\n`));
    await new Promise<void>((r) => service.listen(0, '127.0.0.1', r));
    servicePort = (service.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    delete process.env.ORDO_ISOLATION_MARKER;
    await new Promise((r) => service.close(r));
    fs.rmSync(home, { recursive: true, force: true });
    await closeTestSandboxes();
  });

  it("cannot read ORDO_HOME's credentials, keys or secrets key, nor the project's files", async () => {
    for (const file of [
      path.join(home, 'admin-credentials.json'),
      path.join(home, 'keys', 'signing-keys.json'),
      path.join(home, 'secrets-key.json'),
      path.join(projectRoot(), 'package.json'),
    ]) {
      const r = await bash(`cat ${file}`);
      expect(r).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
      expect(r.outputs?.stderr).toMatch(/No such file or directory/);
      expect(JSON.stringify(r)).not.toContain(marker);
    }
  });

  it('cannot read /etc/shadow, and sees only the sandbox passwd', async () => {
    const shadow = await bash('cat /etc/shadow');
    expect(shadow).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
    const etc = await bash('ls /etc; cat /etc/passwd');
    expect(stdout(etc)).not.toMatch(/shadow|gshadow|sudoers|ssh/);
    expect(stdout(etc)).toContain(`nobody:x:${SANDBOX_UID}:`);
    expect(
      stdout(etc)
        .split('\n')
        .filter((l) => l.includes(':x:')),
    ).toHaveLength(2);
  });

  it("sees none of the host's processes or environment: /proc is its own", async () => {
    const r = await bash(
      `cat /proc/1/environ; echo; ls /proc | grep -c '^[0-9]'; test -e /proc/${process.pid} && echo host`,
    );
    const [environ, count, host] = stdout(r).trim().split('\n');
    expect(environ).not.toContain(marker);
    expect(environ).not.toContain('ORDO_');
    expect(Number(count)).toBeLessThanOrEqual(4);
    expect(host).toBeUndefined();
  });

  it("cannot see another step's working directory or processes while it runs", async () => {
    const name = `step-a-${process.pid}`;
    const a = bash(`echo ${marker} > /work/${name}; echo ${marker} > /tmp/${name}; sleep 3`);
    await new Promise((r) => setTimeout(r, 800));
    const b = await bash(
      `find / -name '${name}' 2>/dev/null; grep -rl ${marker} /work /tmp 2>/dev/null; ls /proc | grep -c '^[0-9]'`,
    );
    expect(stdout(b)).not.toContain(name);
    expect(Number(stdout(b).trim())).toBeLessThanOrEqual(4);
    expect(await a).toMatchObject({ status: 'succeeded' });
  });

  it('cannot write outside /work and /tmp', async () => {
    const r = await bash(
      'for f in /x /etc/x /usr/x /usr/bin/x /run/x /dev/x /proc/x; do (echo x > $f) 2>/dev/null && echo "wrote $f"; done; echo x > /work/ok && echo x > /tmp/ok && echo x > /dev/shm/ok && echo x > /dev/null && echo fine',
    );
    expect(stdout(r).trim()).toBe('fine');
  });

  it("cannot connect to the instance's services on loopback, with or without an egress entry naming another host", async () => {
    const direct = (port: number) => `exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3`;
    const viaProxy = (target: string) =>
      `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT ${target} HTTP/1.1\\r\\nHost: ${target}\\r\\n\\r\\n' >&3 && cat <&3`;
    for (const port of [servicePort, 5432]) {
      expect(await bash(direct(port))).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
      const other = pluginContext({ egress: ['example.com'] });
      expect(await bash(direct(port), other)).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
      const tunnel = await bash(viaProxy(`127.0.0.1:${port}`), pluginContext({ egress: ['example.com'] }));
      expect(stdout(tunnel)).toMatch(/^HTTP\/1\.1 403/);
      expect(stdout(tunnel)).toContain("not in the step's egress list");
    }
    // Named by its literal, it is still refused: the operator lists no private range here.
    const strict = pluginContext({
      egress: [`127.0.0.1:${servicePort}`],
      sandbox: testSandbox({ allowPrivate: [] }),
    });
    const named = await bash(viaProxy(`127.0.0.1:${servicePort}`), strict);
    expect(stdout(named)).toMatch(/^HTTP\/1\.1 403/);
    expect(stdout(named)).toContain('ORDO_EGRESS_ALLOW_PRIVATE');
    expect(stdout(named)).not.toContain(marker);
    expect(strict.lines.some((l) => l.level === 'warn' && /egress denied/.test(l.message))).toBe(true);
  });

  it('cannot reach a private address through a permitted hostname', async () => {
    const r = await bash(
      `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT localhost:${servicePort} HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && cat <&3`,
      pluginContext({ egress: ['localhost'] }),
    );
    expect(stdout(r)).toMatch(/^HTTP\/1\.1 403/);
    expect(stdout(r)).toMatch(/localhost resolves to (127\.0\.0\.1|::1), a private or reserved address/);
    expect(stdout(r)).not.toContain(marker);
    const curl = await bash(
      `curl -fsS --max-time 5 http://localhost:${servicePort}/`,
      pluginContext({ egress: ['localhost'] }),
    );
    expect(curl).toMatchObject({ status: 'failed' });
    expect(JSON.stringify(curl)).not.toContain(marker);
  });

  it('cannot keep a process running after the step', async () => {
    const tag = `sleep 7${process.pid % 1000}.${Date.now() % 1000}`;
    const r = await bash(`(setsid nohup ${tag} >/dev/null 2>&1 &); (nohup ${tag} >/dev/null 2>&1 & disown); echo left`);
    expect(r).toMatchObject({ status: 'succeeded', outputs: { stdout: 'left\n' } });
    await new Promise((res) => setTimeout(res, 300));
    let left = '';
    try {
      left = execFileSync('pgrep', ['-f', tag]).toString();
    } catch {
      // pgrep exits 1 when nothing matches
    }
    expect(left.trim()).toBe('');
  });

  it('runs as an unprivileged user with no capabilities, no_new_privs and no user namespaces of its own', async () => {
    const tag = `sleep 2.${process.pid % 1000}${Date.now() % 1000}`;
    const running = bash(
      `id -u; id -g; grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd):' /proc/self/status; unshare -U true 2>/dev/null && echo nested; ${tag}`,
    );
    await new Promise((r) => setTimeout(r, 500));
    const pid = execFileSync('pgrep', ['-f', '-x', tag]).toString().trim().split('\n')[0];
    const hostUid = Number(/^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    const lines = stdout(await running)
      .trim()
      .split('\n');
    expect(lines.slice(0, 2)).toEqual([String(SANDBOX_UID), String(SANDBOX_UID)]);
    expect(lines).toContain('NoNewPrivs:\t1');
    for (const cap of ['CapEff', 'CapPrm', 'CapBnd']) expect(lines).toContain(`${cap}:\t0000000000000000`);
    expect(lines).not.toContain('nested');
    // On the host the step is an unprivileged uid: its own from the sandbox range when Ordo runs as root.
    if (process.geteuid?.() === 0) {
      expect(hostUid).toBeGreaterThanOrEqual(0x7000_0000);
      expect(hostUid).not.toBe(0);
    } else expect(hostUid).toBe(process.geteuid?.());
  });
});
