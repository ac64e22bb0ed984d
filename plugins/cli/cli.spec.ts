import { execFileSync } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeTestSandboxes, pluginContext, testSandbox } from '../../src/modules/sandbox/testing/plugin-context';
import plugin from './index';

const exec = (cfg: Record<string, unknown>, ctx = pluginContext()) =>
  plugin.execute(plugin.configSchema.parse(cfg), ctx);

/** Pids of processes whose command line contains `marker`. */
const survivors = (marker: string): string[] => {
  try {
    return execFileSync('pgrep', ['-f', marker]).toString().trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
};

describe('cli plugin', () => {
  let server: http.Server;
  let port = 0;

  beforeAll(async () => {
    server = http.createServer((_req, res) => res.end('reachable'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
    await closeTestSandboxes();
  });

  it('runs a command with each argument passed literally, never through a shell', async () => {
    const ctx = pluginContext();
    const r = await exec({ command: 'echo', args: ['hello world', '$(id -u)', '; rm -rf /', '`whoami`', '*'] }, ctx);
    expect(r).toEqual({
      status: 'succeeded',
      outputs: { exitCode: 0, stdout: 'hello world $(id -u) ; rm -rf / `whoami` *\n', stderr: '', truncated: false },
    });
    expect(ctx.lines.map((l) => l.message)).toContain('hello world $(id -u) ; rm -rf / `whoami` *');
  });

  it('resolves bare names against /usr/bin:/bin only and refuses commands the sandbox does not show', async () => {
    expect(await exec({ command: 'definitely-not-a-command' })).toMatchObject({
      status: 'failed',
      error: { code: 'COMMAND_NOT_FOUND' },
    });
    // Ordo's own Node binary exists on the host, but not in the sandbox's view.
    expect(await exec({ command: process.execPath })).toMatchObject({
      status: 'failed',
      error: { code: 'COMMAND_NOT_FOUND', message: expect.stringContaining('it shows /usr') },
    });
    expect(plugin.configSchema.safeParse({ command: './relative' }).success).toBe(false);
    expect(plugin.configSchema.safeParse({ command: '/bin/echo' }).success).toBe(true);
  });

  it('reports a non-zero exit code as EXIT_CODE with the outputs', async () => {
    const r = await exec({ command: '/bin/bash', args: ['-c', 'echo partial; echo broken >&2; exit 3'] });
    expect(r).toMatchObject({
      status: 'failed',
      error: { code: 'EXIT_CODE', retryable: false, message: expect.stringContaining('exited with code 3: broken') },
      outputs: { exitCode: 3, stdout: 'partial\n', stderr: 'broken\n' },
    });
  });

  it('classes exit codes by sysexits: 75 transient, 64 and 65 invalid input, others permanent', async () => {
    const exit = (code: number) => exec({ command: '/bin/bash', args: ['-c', `exit ${code}`] });
    expect(await exit(75)).toMatchObject({ error: { class: 'transient', retryable: true } });
    expect(await exit(65)).toMatchObject({ error: { class: 'invalid_input', retryable: false, input: 'with.args' } });
    expect(await exit(64)).toMatchObject({ error: { class: 'invalid_input', retryable: false } });
    expect(await exit(1)).toMatchObject({ error: { class: 'permanent', retryable: false } });
  });

  it('passes stdin to the command', async () => {
    expect(await exec({ command: 'cat', stdin: 'from stdin' })).toMatchObject({ outputs: { stdout: 'from stdin' } });
  });

  it('has no network at all without egress, and with egress reaches a listed address only through the proxy', async () => {
    const direct = `exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3`;
    const viaProxy = `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://127.0.0.1:${port}/ HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3`;
    expect(await exec({ command: '/bin/bash', args: ['-c', direct] })).toMatchObject({
      status: 'failed',
      error: { code: 'EXIT_CODE' },
    });
    const ctx = () => pluginContext({ egress: [`127.0.0.1:${port}`] });
    // The step's own loopback is not the host's: the listed address is reached through the proxy only.
    expect(await exec({ command: '/bin/bash', args: ['-c', direct] }, ctx())).toMatchObject({ status: 'failed' });
    expect(await exec({ command: '/bin/bash', args: ['-c', viaProxy] }, ctx())).toMatchObject({
      status: 'succeeded',
      outputs: { stdout: expect.stringContaining('reachable') },
    });
    // CONNECT (how HTTPS and other protocols go through): the tunnel reaches the listed address.
    const tunnel = `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT 127.0.0.1:${port} HTTP/1.1\\r\\n\\r\\nGET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3`;
    expect(await exec({ command: '/bin/bash', args: ['-c', tunnel] }, ctx())).toMatchObject({
      status: 'succeeded',
      outputs: { stdout: expect.stringMatching(/^HTTP\/1\.1 200 Connection Established[\s\S]*reachable$/) },
    });
    const curl = await exec(
      { command: 'curl', args: ['-sS', '--max-time', '5', `http://127.0.0.1:${port}/`] },
      pluginContext({ egress: [`127.0.0.1:${port}`] }),
    );
    expect(curl).toMatchObject({ status: 'succeeded', outputs: { stdout: 'reachable' } });
  });

  it('sees a scrubbed environment: PATH, HOME, LANG, PWD and the declared variables only', async () => {
    process.env.ORDO_TEST_HOST_SECRET = 'host-only';
    try {
      const r = await exec({ command: 'env', env: { GREETING: 'hi' } });
      const vars = (r.outputs?.stdout as string).trim().split('\n').sort();
      expect(vars.map((v) => v.split('=')[0])).toEqual(['GREETING', 'HOME', 'LANG', 'PATH', 'PWD']);
      expect(vars).toContain('PATH=/usr/bin:/bin');
      expect(vars).toContain('HOME=/work');
      expect(vars).toContain('GREETING=hi');
    } finally {
      delete process.env.ORDO_TEST_HOST_SECRET;
    }
  });

  it('runs in a fresh private working directory /work (also HOME) that no later step sees', async () => {
    const r = await exec({
      command: '/bin/bash',
      args: ['-c', 'pwd; echo "$HOME"; ls -A | wc -l; stat -c %a .; echo kept > scratch; cat scratch'],
    });
    expect((r.outputs?.stdout as string).trim().split('\n')).toEqual(['/work', '/work', '0', '700', 'kept']);
    const again = await exec({ command: '/bin/bash', args: ['-c', 'ls -A /work /tmp | grep -c scratch || true'] });
    expect((again.outputs?.stdout as string).trim()).toBe('0');
  });

  it('bounds the working directory and /tmp by their sizes', async () => {
    const r = await exec({
      command: '/bin/bash',
      args: ['-c', 'head -c 3000000 /dev/zero > /work/big'],
      workdirMb: 2,
      maxFileSizeMb: 100,
    });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
    expect(r.outputs?.stderr).toMatch(/No space left on device/);
    const t = await exec({ command: '/bin/bash', args: ['-c', 'head -c 3000000 /dev/zero > /tmp/big'], tmpMb: 1 });
    expect(t).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
  });

  it('kills the whole process tree on timeout, grandchildren included', async () => {
    const marker = `sleep 4${process.pid % 1000}.${Date.now() % 1000}`;
    const r = await exec({
      command: '/bin/bash',
      args: ['-c', `${marker} & (setsid ${marker} &); ${marker}`],
      timeoutMs: 500,
    });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'TIMEOUT', retryable: true } });
    await new Promise((res) => setTimeout(res, 200));
    expect(survivors(marker)).toEqual([]);
  });

  it('kills the process tree when the step is aborted', async () => {
    const ctx = pluginContext();
    const marker = `sleep 5${process.pid % 1000}.${Date.now() % 1000}`;
    setTimeout(() => ctx.controller.abort(), 300);
    const r = await exec({ command: '/bin/bash', args: ['-c', `${marker} & ${marker}`] }, ctx);
    expect(r).toMatchObject({ status: 'failed', error: { code: 'ABORTED' } });
    await new Promise((res) => setTimeout(res, 200));
    expect(survivors(marker)).toEqual([]);
  });

  it('leaves no background process behind after a successful run', async () => {
    const marker = `sleep 6${process.pid % 1000}.${Date.now() % 1000}`;
    const r = await exec({ command: '/bin/bash', args: ['-c', `(setsid ${marker} >/dev/null 2>&1 &); echo done`] });
    expect(r).toMatchObject({ status: 'succeeded', outputs: { stdout: 'done\n' } });
    await new Promise((res) => setTimeout(res, 200));
    expect(survivors(marker)).toEqual([]);
  });

  it('keeps only the tail of oversized output and says so', async () => {
    const ctx = pluginContext();
    const r = await exec(
      { command: '/bin/bash', args: ['-c', 'for i in $(seq 1 5000); do echo "line $i"; done'], maxOutputBytes: 100 },
      ctx,
    );
    expect(r.status).toBe('succeeded');
    const stdout = r.outputs?.stdout as string;
    expect(Buffer.byteLength(stdout)).toBeLessThanOrEqual(100);
    expect(stdout.endsWith('line 5000\n')).toBe(true);
    expect(r.outputs?.truncated).toBe(true);
    expect(ctx.lines.filter((l) => l.level === 'info').length).toBeLessThanOrEqual(1000);
    expect(ctx.lines.some((l) => /only the tail/.test(l.message))).toBe(true);
  });

  it('enforces the file size and CPU rlimits', async () => {
    const big = await exec({ command: '/bin/bash', args: ['-c', 'head -c 3000000 /dev/zero > f'], maxFileSizeMb: 1 });
    expect(big).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
    const spin = await exec({
      command: '/bin/bash',
      args: ['-c', 'while :; do :; done'],
      cpuSeconds: 1,
      timeoutMs: 20_000,
    });
    expect(spin).toMatchObject({ status: 'failed', error: { code: 'EXIT_CODE' } });
  });

  it('redacts secret values from the log and the outputs', async () => {
    const ctx = pluginContext({ secrets: ['tok-123-secret'] });
    const r = await exec({ command: 'echo', args: ['token=tok-123-secret'] }, ctx);
    expect(JSON.stringify([r, ctx.lines])).not.toContain('tok-123-secret');
  });

  it('fails with SANDBOX_UNAVAILABLE instead of running unsandboxed when the sandbox cannot be set up', async () => {
    const ctx = pluginContext({ sandbox: testSandbox({ bwrap: '/nonexistent/bwrap' }) });
    const r = await exec({ command: 'echo', args: ['should not run'] }, ctx);
    expect(r).toMatchObject({
      status: 'failed',
      error: { code: 'SANDBOX_UNAVAILABLE', retryable: false, message: expect.stringContaining('bubblewrap') },
    });
  });

  it('runs unsandboxed with a loud warning on every step when the operator relaxes the requirement', async () => {
    const ctx = pluginContext({ sandbox: testSandbox({ bwrap: '/nonexistent/bwrap', cliRequired: false }) });
    const r = await exec({ command: 'echo', args: ['ran'] }, ctx);
    expect(r).toMatchObject({ status: 'succeeded', outputs: { stdout: 'ran\n' } });
    expect(ctx.lines.some((l) => l.level === 'warn' && /WITHOUT the cli sandbox/.test(l.message))).toBe(true);
  });
});
