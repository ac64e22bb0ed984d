import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { projectRoot } from '../../core/home/project-root';
import { SANDBOX_UID } from './bwrap';
import { Sandbox } from './sandbox';

/**
 * A script that escaped its isolate lands in its sandbox process: the pool runs a stand-in host
 * (test/support/sandbox/escape-probe.js) in that process's place, which reports what it can read,
 * write, reach and see there. Each must be nothing of the instance's.
 */
describe('a script sandbox process, as an isolate escape would find it', () => {
  const marker = `host-secret-${process.pid}-${Date.now()}`;
  let home: string;
  let service: net.Server;
  let port = 0;
  let sandbox: Sandbox;

  const probe = async (spec: { read?: string[]; write?: string[]; connect?: [string, number][] }) => {
    const outcome = await sandbox.scripts().run(
      {
        code: JSON.stringify(spec),
        inputsJson: '{}',
        stepsJson: '{}',
        memoryLimitMb: 64,
        timeoutMs: 10_000,
        maxOutputBytes: 1 << 20,
        maxLogLines: 10,
        maxLogLineBytes: 100,
        maxFetches: 0,
      },
      { signal: new AbortController().signal, fetch: async () => '{}' },
    );
    if (!outcome.ok) throw new Error(outcome.message);
    return JSON.parse(outcome.json) as {
      uid: number;
      gid: number;
      noNewPrivs: string;
      capEff: string;
      pids: number;
      env: string[];
      read: Record<string, string>;
      write: Record<string, string>;
      connect: Record<string, string>;
    };
  };

  beforeAll(async () => {
    process.env.ORDO_ISOLATION_MARKER = marker;
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-home-'));
    fs.chmodSync(home, 0o755);
    fs.writeFileSync(path.join(home, 'admin-credentials.json'), marker, { mode: 0o600 });
    service = net.createServer((s) => s.end(marker));
    await new Promise<void>((r) => service.listen(0, '127.0.0.1', r));
    port = (service.address() as net.AddressInfo).port;
    sandbox = new Sandbox(
      { cliRequired: true, uidBase: 0x7000_0000, allowPrivate: ['127.0.0.1'], scriptProcesses: 1 },
      { entry: path.join(projectRoot(), 'test', 'support', 'sandbox', 'escape-probe.js') },
    );
  });
  afterAll(async () => {
    delete process.env.ORDO_ISOLATION_MARKER;
    await sandbox.close();
    await new Promise((r) => service.close(r));
    fs.rmSync(home, { recursive: true, force: true });
  });

  it('runs as an unprivileged user with no capabilities and no_new_privs, seeing only its own processes', async () => {
    const r = await probe({});
    expect(sandbox.scripts().sandboxProblem).toBeUndefined();
    expect([r.uid, r.gid]).toEqual([SANDBOX_UID, SANDBOX_UID]);
    expect(r.noNewPrivs).toBe('1');
    expect(r.capEff).toBe('0000000000000000');
    expect(r.pids).toBeLessThanOrEqual(3);
    expect(r.env).not.toContain('ORDO_ISOLATION_MARKER');
    // On the host, the process is a uid of its own when Ordo runs as root.
    const pid = sandbox.scripts().allPids()[0];
    const host = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    if (process.geteuid?.() === 0) expect(Number(/^Uid:\s+(\d+)/m.exec(host)?.[1])).toBeGreaterThanOrEqual(0x7000_0000);
  });

  it("reads none of the instance's files and writes nowhere but its /tmp", async () => {
    const r = await probe({
      read: [
        path.join(home, 'admin-credentials.json'),
        path.join(projectRoot(), 'package.json'),
        '/etc/shadow',
        '/etc/passwd',
        `/proc/${process.pid}/environ`,
        '/proc/1/environ',
      ],
      write: ['/x', '/etc/x', '/usr/x', '/ordo/x', '/ordo/node_modules/isolated-vm/x', '/tmp/ok'],
    });
    expect(r.read[path.join(home, 'admin-credentials.json')]).toBe('ENOENT');
    expect(r.read[path.join(projectRoot(), 'package.json')]).toBe('ENOENT');
    expect(r.read['/etc/shadow']).toBe('ENOENT');
    expect(r.read[`/proc/${process.pid}/environ`]).not.toBe('ok');
    expect(JSON.stringify(r)).not.toContain(marker);
    for (const f of ['/x', '/etc/x', '/usr/x', '/ordo/x', '/ordo/node_modules/isolated-vm/x'])
      expect(r.write[f]).toMatch(/^(EROFS|EACCES|ENOENT)$/);
    expect(r.write['/tmp/ok']).toBe('ok');
  });

  it('reaches no network: not the instance on loopback, not an outside address', async () => {
    const r = await probe({
      connect: [
        ['127.0.0.1', port],
        ['127.0.0.1', 5432],
        ['1.1.1.1', 443],
      ],
    });
    for (const v of Object.values(r.connect)) expect(v).not.toBe('ok');
    expect(r.connect[`127.0.0.1:${port}`]).toBe('ECONNREFUSED');
    expect(r.connect['1.1.1.1:443']).toBe('ENETUNREACH');
  });
});
