import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeTestSandboxes, pluginContext, testSandbox } from '../../src/modules/sandbox/testing/plugin-context';
import plugin from './index';

/** The script sandbox pool of the sandbox pluginContext() hands out. */
const scriptPool = () => testSandbox().scripts();

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
    await closeTestSandboxes();
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
    await closeTestSandboxes();
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

  it("fails with the error's name and message when the script replaces Error.prepareStackTrace or the stack", async () => {
    const codes = [
      `Error.prepareStackTrace = () => ({}); throw new TypeError('bad ' + inputs.x)`,
      `Error.prepareStackTrace = () => 42; throw new TypeError('bad ' + inputs.x)`,
      `Error.prepareStackTrace = () => { throw new Error('no stack'); }; throw new TypeError('bad ' + inputs.x)`,
      `Error.prepareStackTrace = () => ({ get message() { throw 1; }, toString() { throw 2; } });
       throw new TypeError('bad ' + inputs.x)`,
      `const e = new TypeError('bad ' + inputs.x); e.stack = { toString() { throw 3; } }; throw e`,
    ];
    for (const code of codes) {
      expect(await exec(code, { inputs: { x: 7 } })).toEqual({
        status: 'failed',
        error: { code: 'SCRIPT_ERROR', message: 'TypeError: bad 7', retryable: false },
      });
    }
  });

  it('fails with a fixed message naming the type when the script throws a value that is not an Error', async () => {
    const notAnError = 'the script threw a value that is not an Error';
    const cases: [string, string][] = [
      [`throw Symbol('s')`, `${notAnError} (symbol)`],
      ['throw null', `${notAnError} (null)`],
      ['throw undefined', `${notAnError} (undefined)`],
      [`throw { toString() { throw new Error('no'); }, get message() { throw 1; } }`, `${notAnError} (object)`],
      ['throw new Proxy({}, { get() { throw 1; }, getPrototypeOf() { throw 2; } })', `${notAnError} (object)`],
      ['throw () => 1', `${notAnError} (function)`],
      [`throw 'plain text'`, `${notAnError} (string): plain text`],
      ['throw 42', `${notAnError} (number): 42`],
      [`throw { name: 'Custom', message: 'error-like' }`, 'Custom: error-like'],
    ];
    for (const [code, message] of cases) {
      expect(await exec(code)).toEqual({
        status: 'failed',
        error: { code: 'SCRIPT_ERROR', message, retryable: false },
      });
    }
  });

  it('describes a rejected promise, an unserializable result and a throw after a fetch the same way', async () => {
    const notAnError = 'the script threw a value that is not an Error';
    const cases: [string, string][] = [
      [`return Promise.reject(Symbol('r'))`, `${notAnError} (symbol)`],
      ['await null; throw null', `${notAnError} (null)`],
      ['await Promise.reject({ get message() { throw 1; } })', `${notAnError} (object)`],
      [`return { toJSON() { throw Symbol('j'); } }`, `${notAnError} (symbol)`],
      [
        `try { await fetch('http://127.0.0.1:${port}/x'); } catch {}
         Error.prepareStackTrace = () => ({}); throw new RangeError('after fetch')`,
        'RangeError: after fetch',
      ],
    ];
    for (const [code, message] of cases) {
      expect(await exec(code)).toEqual({
        status: 'failed',
        error: { code: 'SCRIPT_ERROR', message, retryable: false },
      });
    }
  });

  it('stops a getter or Error.prepareStackTrace of a thrown value at the time limit', async () => {
    await pluginContext().sandbox.scripts().warm();
    const codes = [
      'throw { get message() { while (true) {} } }',
      `Error.prepareStackTrace = () => { while (true) {} }; throw new Error('never described')`,
    ];
    for (const code of codes) {
      const started = Date.now();
      const r = await exec(code, { timeoutMs: 200 });
      expect(r).toMatchObject({ status: 'failed', error: { code: 'SCRIPT_TIMEOUT', retryable: false } });
      // Within the isolate's limit, not only at the parent's kill of a process that stopped answering (1 s later).
      expect(Date.now() - started).toBeLessThan(1200);
    }
    expect(await exec('return 1')).toEqual({ status: 'succeeded', outputs: { result: 1 } });
  });

  it('does not let an error the script throws pass for a timeout or a memory failure', async () => {
    for (const message of [
      'Script execution timed out.',
      'Isolate was disposed during execution due to memory limit',
    ]) {
      expect(await exec(`throw new Error(${JSON.stringify(message)})`)).toMatchObject({
        status: 'failed',
        error: { code: 'SCRIPT_ERROR', retryable: false, message: expect.stringContaining(`Error: ${message}`) },
      });
    }
  });

  it('ignores a rejection the script leaves unhandled, whatever its value', async () => {
    const codes = [
      `Promise.reject(Symbol('u')); return 'done'`,
      `Promise.reject(new Error('unhandled')); return 'done'`,
      `Promise.reject({ get message() { while (true) {} } }); return 'done'`,
      `try { await fetch('http://127.0.0.1:${port}/x'); } catch {}
       Promise.reject({ get stack() { while (true) {} } }); return 'done'`,
    ];
    for (const code of codes) {
      expect(await exec(code, { timeoutMs: 2000 })).toEqual({ status: 'succeeded', outputs: { result: 'done' } });
    }
  });

  it('runs no code of a step after it ended: a fetch it left unanswered cannot fail the next steps', async () => {
    const silent = http.createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const silentPort = (silent.address() as AddressInfo).port;
    try {
      const first = await exec(
        `fetch('http://127.0.0.1:${silentPort}/').catch(() => { Promise.reject(new Error('left behind')); });
         return 'first'`,
        { timeoutMs: 1000 },
        pluginContext({ egress: [`127.0.0.1:${silentPort}`] }),
      );
      expect(first).toEqual({ status: 'succeeded', outputs: { result: 'first' } });
      for (let i = 0; i < 3; i++)
        expect(await exec('return "next"')).toEqual({ status: 'succeeded', outputs: { result: 'next' } });
    } finally {
      silent.closeAllConnections();
      await new Promise((r) => silent.close(r));
    }
  });

  it('refuses code that closes its function early, and reports a syntax error without host details', async () => {
    const r = await exec(`}); Promise.reject({ get message() { while (true) {} } }); (function () {`, {
      timeoutMs: 2000,
    });
    expect(r).toMatchObject({
      status: 'failed',
      error: { code: 'SCRIPT_ERROR', message: expect.stringMatching(/^SyntaxError: /) },
    });
    expect(await exec('return (')).toEqual({
      status: 'failed',
      error: { code: 'SCRIPT_ERROR', message: "SyntaxError: Unexpected token '}'", retryable: false },
    });
  });

  it('prints console values with a replaced Error.prepareStackTrace, hostile objects and replaced builtins', async () => {
    const ctx = pluginContext();
    const r = await exec(
      `Error.prepareStackTrace = () => ({});
       console.log(new TypeError('logged'));
       console.log(Symbol('s'), null, { toJSON() { throw 1; }, toString() { throw 2; } }, new Proxy({}, { get() { throw 3; } }));
       JSON.stringify = () => ({}); Array.prototype.join = () => ({}); String.prototype.slice = () => ({});
       console.log({ a: 1 }, 'text');
       return 'printed';`,
      {},
      ctx,
    );
    expect(r).toEqual({ status: 'succeeded', outputs: { result: 'printed' } });
    expect(ctx.lines.filter((l) => l.level === 'info').map((l) => l.message)).toEqual([
      'TypeError: logged',
      'Symbol(s) null [unprintable] [unprintable]',
      '{"a":1} text',
    ]);
  });
});
