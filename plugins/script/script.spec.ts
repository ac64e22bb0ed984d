import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pluginContext } from '../../src/modules/sandbox/testing/plugin-context';
import plugin, { scriptPool } from './index';

process.env.ORDO_SCRIPT_SANDBOX_PROCESSES = '2';

const exec = (code: string, extra: Record<string, unknown> = {}, ctx = pluginContext()) =>
  plugin.execute(plugin.configSchema.parse({ code, ...extra }), ctx);

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('script plugin', () => {
  let server: http.Server;
  let port = 0;

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () =>
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ method: req.method, body, tp: req.headers.traceparent })),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await plugin.close!();
    await new Promise((r) => server.close(r));
  });

  it('returns the script value computed from inputs and upstream steps, with console lines in the step log', async () => {
    const ctx = pluginContext();
    const r = await exec(
      `console.log('sum of', inputs.xs); console.warn({ warn: true }); console.error(new Error('shown'));
       return { total: inputs.xs.reduce((a, b) => a + b, 0) + steps.fetch.outputs.n, when: await Promise.resolve('async ok') };`,
      { inputs: { xs: [1, 2, 3] }, steps: { fetch: { outputs: { n: 10 } } } },
      ctx,
    );
    expect(r).toEqual({ status: 'succeeded', outputs: { total: 16, when: 'async ok' } });
    expect(ctx.lines.map((l) => [l.level, l.message.split('\n')[0]])).toEqual([
      ['info', 'sum of [1,2,3]'],
      ['warn', '{"warn":true}'],
      ['error', 'Error: shown'],
    ]);
  });

  it('wraps a non-object result as { result }', async () => {
    expect(await exec('return [1, "two"]')).toEqual({ status: 'succeeded', outputs: { result: [1, 'two'] } });
    expect(await exec('/* nothing */')).toEqual({ status: 'succeeded', outputs: { result: null } });
  });

  it('gives no way to the host process through the Function constructor', async () => {
    const r = await exec(`
      const out = {};
      try { const p = this.constructor.constructor('return process')(); out.viaThis = typeof p; } catch (e) { out.viaThis = e.name; }
      try { const p = inputs.constructor.constructor('return process')(); out.viaInputs = typeof p; } catch (e) { out.viaInputs = e.name; }
      try { out.viaConsole = console.log.constructor('return typeof require')(); } catch (e) { out.viaConsole = e.name; }
      return out;`);
    expect(r).toEqual({
      status: 'succeeded',
      outputs: { viaThis: 'ReferenceError', viaInputs: 'ReferenceError', viaConsole: 'undefined' },
    });
  });

  it('exposes no host globals: no require, process, module, Buffer or timers', async () => {
    const r = await exec(`
      const g = Function('return this')();
      const names = ['require', 'process', 'module', 'exports', 'Buffer', 'global', 'setTimeout', 'setInterval', 'setImmediate', '__dirname'];
      return { types: Object.fromEntries(names.map((n) => [n, typeof g[n]])), own: Object.getOwnPropertyNames(g).filter((n) => !/^[A-Z]/.test(n)).sort() };`);
    expect(r.status).toBe('succeeded');
    const out = r.outputs as { types: Record<string, string>; own: string[] };
    expect(Object.values(out.types)).toEqual(Array(10).fill('undefined'));
    for (const n of ['require', 'process', 'setTimeout', 'ivm', '_ivm']) expect(out.own).not.toContain(n);
  });

  it('keeps prototype tricks on the passed-in objects and the result inside the isolate', async () => {
    const cfg = { inputs: { user: { name: 'a' } } };
    const r = await exec(
      `inputs.__proto__.polluted = 'yes'; Object.prototype.polluted2 = 'yes'; Array.prototype.map = null; inputs.user.name = 'changed';
       return JSON.parse('{"__proto__": {"polluted3": "yes"}, "ok": true}');`,
      cfg,
    );
    expect(r.status).toBe('succeeded');
    expect(cfg.inputs.user.name).toBe('a');
    const probe = {} as Record<string, unknown>;
    expect([probe.polluted, probe.polluted2, probe.polluted3]).toEqual([undefined, undefined, undefined]);
    expect(typeof [].map).toBe('function');
    expect(Object.getPrototypeOf(r.outputs)).toBe(Object.prototype);
  });

  it('starts every step in a fresh context: globals and prototype changes of a previous step are gone', async () => {
    await exec(`globalThis.leak = 'previous'; Object.prototype.sticky = 1; return 1;`);
    const r = await exec(`return { leak: typeof leak, sticky: ({}).sticky === undefined }`);
    expect(r).toEqual({ status: 'succeeded', outputs: { leak: 'undefined', sticky: true } });
  });

  it('fails a thrown error with SCRIPT_ERROR and the message', async () => {
    const r = await exec(`throw new TypeError('bad input ' + inputs.x)`, { inputs: { x: 7 } });
    expect(r).toMatchObject({
      status: 'failed',
      error: { code: 'SCRIPT_ERROR', retryable: false, message: expect.stringContaining('TypeError: bad input 7') },
    });
    expect(await exec('return (')).toMatchObject({ status: 'failed', error: { code: 'SCRIPT_ERROR' } });
  });

  it('kills an infinite loop at its time limit, replaces the process, and the next step works', async () => {
    const before = scriptPool().stats.killed;
    const r = await exec('while (true) {}', { timeoutMs: 300 });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'SCRIPT_TIMEOUT', retryable: false } });
    expect(scriptPool().stats.killed).toBe(before + 1);
    expect(await exec('return { next: "fine" }')).toEqual({ status: 'succeeded', outputs: { next: 'fine' } });
  });

  it('times out a promise that never settles', async () => {
    const r = await exec('await new Promise(() => {}); return 1;', { timeoutMs: 300 });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'SCRIPT_TIMEOUT' } });
  });

  it('kills a memory bomb at its memory limit, replaces the process, and the next step works', async () => {
    const before = scriptPool().stats.killed;
    const r = await exec('const a = []; while (true) a.push(new Array(100000).fill(Math.random()));', {
      memoryLimitMb: 32,
      timeoutMs: 20_000,
    });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'SCRIPT_MEMORY', retryable: false } });
    expect(scriptPool().stats.killed).toBe(before + 1);
    expect(await exec('return 1')).toEqual({ status: 'succeeded', outputs: { result: 1 } });
  });

  it('refuses a result larger than maxOutputBytes without copying it out', async () => {
    expect(await exec('return "x".repeat(2 * 1024 * 1024)')).toMatchObject({
      status: 'failed',
      error: { code: 'OUTPUT_TOO_LARGE' },
    });
    // Multi-byte characters are counted in bytes, not characters.
    expect(await exec('return "é".repeat(600)', { maxOutputBytes: 1000 })).toMatchObject({
      status: 'failed',
      error: { code: 'OUTPUT_TOO_LARGE' },
    });
    expect(await exec('return "é".repeat(400)', { maxOutputBytes: 1000 })).toMatchObject({ status: 'succeeded' });
  });

  it('fails only the step inside a crashed sandbox process while a step in another process succeeds', async () => {
    const pool = scriptPool();
    await pool.warm();
    const victim = exec('while (true) {}', { timeoutMs: 30_000 });
    let pid: number | undefined;
    for (let i = 0; i < 100 && pid === undefined; i++) {
      await new Promise((r) => setTimeout(r, 20));
      pid = pool.busyPids()[0];
    }
    expect(pid).toBeDefined();
    const other = await exec('return { other: "ok" }');
    expect(other).toEqual({ status: 'succeeded', outputs: { other: 'ok' } });
    process.kill(pid!, 'SIGKILL');
    expect(await victim).toMatchObject({ status: 'failed', error: { code: 'SANDBOX_CRASHED', retryable: true } });
    expect(await exec('return 2')).toEqual({ status: 'succeeded', outputs: { result: 2 } });
  });

  it('ends a step aborted while its sandbox process is still starting', async () => {
    await plugin.close!();
    const ctx = pluginContext();
    const pending = exec('return 1', {}, ctx);
    ctx.controller.abort();
    expect(await pending).toMatchObject({ status: 'failed', error: { code: 'ABORTED' } });
    expect(await exec('return 3')).toEqual({ status: 'succeeded', outputs: { result: 3 } });
  });

  it('stops a running script when the step is aborted and kills its process', async () => {
    const ctx = pluginContext();
    await scriptPool().warm();
    const running = exec('while (true) {}', { timeoutMs: 30_000 }, ctx);
    let pid: number | undefined;
    for (let i = 0; i < 100 && pid === undefined; i++) {
      await new Promise((r) => setTimeout(r, 20));
      pid = scriptPool().busyPids()[0];
    }
    expect(pid).toBeDefined();
    ctx.controller.abort();
    expect(await running).toMatchObject({ status: 'failed', error: { code: 'ABORTED' } });
    for (let i = 0; i < 100 && alive(pid!); i++) await new Promise((r) => setTimeout(r, 20));
    expect(alive(pid!)).toBe(false);
  });

  it('runs sandbox processes in their own network namespace (no network even outside the isolate)', async () => {
    const pool = scriptPool();
    await pool.warm();
    const own = fs.readlinkSync('/proc/self/ns/net');
    const pids = pool.allPids();
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) expect(fs.readlinkSync(`/proc/${pid}/ns/net`)).not.toBe(own);
  });

  it('denies fetch when the step declares no egress, checked in the host', async () => {
    const r = await exec(
      `try { await fetch('http://127.0.0.1:${port}/x'); return 'reached'; } catch (e) { return { code: e.code, message: e.message }; }`,
    );
    expect(r).toMatchObject({ status: 'succeeded', outputs: { code: 'EGRESS_DENIED' } });
    const meta = await exec(
      `try { await fetch('http://169.254.169.254/latest/meta-data/'); return 'reached'; } catch (e) { return { code: e.code }; }`,
      {},
      pluginContext({ egress: ['*.254'] }),
    );
    expect(meta).toEqual({ status: 'succeeded', outputs: { code: 'EGRESS_DENIED' } });
  });

  it('fetches from an allowed host with JSON and text bodies and sends traceparent', async () => {
    const ctx = pluginContext({ egress: [`127.0.0.1:${port}`] });
    const r = await exec(
      `const res = await fetch('http://127.0.0.1:${port}/echo', { method: 'POST', body: { a: 1 } });
       return { status: res.status, ok: res.ok, type: res.headers.get('Content-Type'), json: await res.json() };`,
      {},
      ctx,
    );
    expect(r).toEqual({
      status: 'succeeded',
      outputs: {
        status: 200,
        ok: true,
        type: 'application/json',
        json: { method: 'POST', body: '{"a":1}', tp: ctx.traceparent },
      },
    });
    expect(ctx.lines.some((l) => l.message.startsWith('fetch POST'))).toBe(true);
  });

  it('redacts secret values from console lines, errors and outputs', async () => {
    const ctx = pluginContext({ secrets: ['hunter2-secret'] });
    const r = await exec(
      `console.log('token is', inputs.t); throw new Error('failed with ' + inputs.t)`,
      { inputs: { t: 'hunter2-secret' } },
      ctx,
    );
    expect(JSON.stringify([r, ctx.lines])).not.toContain('hunter2-secret');
    const ok = await exec(`return { echoed: inputs.t }`, { inputs: { t: 'hunter2-secret' } }, ctx);
    expect(ok).toEqual({ status: 'succeeded', outputs: { echoed: '[redacted]' } });
  });
});
