'use strict';
// The script sandbox process: runs one script step at a time in an isolated-vm isolate and answers
// over the IPC channel. Plain CommonJS so it runs unchanged from src/ (tests) and from dist/ (swc
// copies it through). The parent (script-pool.ts) kills and replaces this process whenever a script
// times out, exceeds its memory or the process dies; this file therefore never tries to recover from
// those itself, it only reports them.
//
// Isolation model: one warm isolate per process, a FRESH CONTEXT per step. A context has its own
// global object and builtins; nothing of a previous step's context is reachable from the next one
// (the host keeps no reference into it and releases it after the step). The isolate is recreated
// when the memory limit changes, after MAX_RUNS_PER_ISOLATE steps, when its heap stays above half
// its limit, and whenever a step failed with a timeout or memory error (the process is replaced then).
// Nothing but JSON strings crosses the boundary: inputs go in as JSON text parsed inside the
// isolate, the result comes out as JSON text, console lines as strings.

const ivm = require('isolated-vm');

const MAX_RUNS_PER_ISOLATE = 500;

let isolate = null;
let isolateLimitMb = 0;
let runsOnIsolate = 0;
let fetchSeq = 0;
const pendingFetches = new Map();

function send(msg) {
  if (process.connected) process.send(msg);
}

const BOOTSTRAP = `
const log = $0;
const hostFetch = $1;
const maxLine = $2;
const fmt = (v) => {
  try {
    if (typeof v === 'string') return v;
    if (v instanceof Error) return String(v.stack || v);
    const s = JSON.stringify(v);
    return s === undefined ? String(v) : s;
  } catch {
    try { return String(v); } catch { return '[unprintable]'; }
  }
};
const mk = (level) => function (...args) {
  let line = args.map(fmt).join(' ');
  if (line.length > maxLine) line = line.slice(0, maxLine) + '…';
  log.applyIgnored(undefined, [level, line]);
};
const console = Object.freeze({ log: mk('info'), info: mk('info'), debug: mk('debug'), warn: mk('warn'), error: mk('error') });
Object.defineProperty(globalThis, 'console', { value: console, writable: false, configurable: false, enumerable: false });
const makeResponse = (r) => {
  const headers = r.headers;
  return Object.freeze({
    status: r.status,
    ok: r.status >= 200 && r.status < 300,
    url: r.url,
    headers: Object.freeze({ get: (name) => headers[String(name).toLowerCase()] ?? null }),
    text: async () => r.body,
    json: async () => JSON.parse(r.body),
  });
};
async function fetch(url, init) {
  const req = init == null ? {} : { method: init.method, headers: init.headers, body: init.body };
  const raw = await hostFetch.apply(undefined, [String(url), JSON.stringify(req)], { result: { promise: true } });
  const r = JSON.parse(raw);
  if (r.error) {
    const e = new Error(r.error.code + ': ' + r.error.message);
    e.code = r.error.code;
    throw e;
  }
  return makeResponse(r);
}
Object.defineProperty(globalThis, 'fetch', { value: fetch, writable: false, configurable: false, enumerable: false });
`;

function wrap(code) {
  // The step's code is the body of an async function receiving (inputs, steps). Its value is
  // serialized inside the isolate; an oversize result never crosses the boundary.
  return `
const inputs = JSON.parse($0);
const steps = JSON.parse($1);
const max = $2;
return (async function (inputs, steps) {
${code}
}).call(undefined, inputs, steps).then((v) => {
  const s = JSON.stringify(v === undefined ? null : v);
  if (s === undefined) return 'null';
  if (s.length > max) return '\\u0000TOO_LARGE:' + s.length;
  return s;
});`;
}

function getIsolate(memoryLimitMb) {
  if (isolate && (isolate.isDisposed || isolateLimitMb !== memoryLimitMb || runsOnIsolate >= MAX_RUNS_PER_ISOLATE)) {
    if (!isolate.isDisposed) isolate.dispose();
    isolate = null;
  }
  if (!isolate) {
    isolate = new ivm.Isolate({ memoryLimit: memoryLimitMb });
    isolateLimitMb = memoryLimitMb;
    runsOnIsolate = 0;
  }
  runsOnIsolate++;
  return isolate;
}

function classify(e, iso) {
  const message = e && typeof e.message === 'string' ? e.message : String(e);
  if (iso.isDisposed || /memory limit/i.test(message)) {
    return {
      code: 'SCRIPT_MEMORY',
      message: `the script exceeded its memory limit of ${isolateLimitMb} MB`,
      fatal: true,
    };
  }
  if (/execution timed out/i.test(message))
    return { code: 'SCRIPT_TIMEOUT', message: 'the script exceeded its time limit', fatal: true };
  const name = e && typeof e.name === 'string' ? e.name : 'Error';
  const stack = e && typeof e.stack === 'string' ? e.stack : `${name}: ${message}`;
  return { code: 'SCRIPT_ERROR', message: stack.slice(0, 4000), fatal: false };
}

async function run(job) {
  const logs = [];
  let dropped = 0;
  const iso = getIsolate(job.memoryLimitMb);
  let context;
  let logRef;
  let fetchRef;
  let timer;
  let fetches = 0;
  try {
    context = await iso.createContext();
    logRef = new ivm.Reference((level, line) => {
      if (logs.length < job.maxLogLines) logs.push({ ts: new Date().toISOString(), level, message: String(line) });
      else dropped++;
    });
    fetchRef = new ivm.Reference(async (url, init) => {
      if (++fetches > job.maxFetches) {
        return JSON.stringify({
          error: { code: 'FETCH_LIMIT', message: `at most ${job.maxFetches} fetch calls per step` },
        });
      }
      const reqId = ++fetchSeq;
      const answer = new Promise((resolve) => pendingFetches.set(reqId, { resolve, job: job.id }));
      send({ type: 'fetch', id: job.id, reqId, url, init });
      return answer;
    });
    await context.evalClosure(BOOTSTRAP, [logRef, fetchRef, job.maxLogLineBytes]);
    const timeout = new Promise((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error('Script execution timed out.')), job.timeoutMs);
    });
    const out = await Promise.race([
      context.evalClosure(wrap(job.code), [job.inputsJson, job.stepsJson, job.maxOutputBytes], {
        timeout: job.timeoutMs,
        result: { promise: true },
      }),
      timeout,
    ]);
    if (typeof out === 'string' && out.startsWith('\u0000TOO_LARGE:')) {
      return {
        ok: false,
        code: 'OUTPUT_TOO_LARGE',
        message: `the result (${out.slice(11)} characters of JSON) exceeds the limit of ${job.maxOutputBytes} bytes`,
        logs,
        dropped,
      };
    }
    return { ok: true, json: out, logs, dropped };
  } catch (e) {
    const c = classify(e, iso);
    return { ok: false, code: c.code, message: c.message, fatal: c.fatal, logs, dropped };
  } finally {
    clearTimeout(timer);
    // A fetch the script left unawaited is answered here: its step is over, the parent ignores it.
    for (const [reqId, pending] of pendingFetches) {
      if (pending.job !== job.id) continue;
      pendingFetches.delete(reqId);
      pending.resolve(JSON.stringify({ error: { code: 'STEP_ENDED', message: 'the step has ended' } }));
    }
    for (const r of [logRef, fetchRef, context]) {
      try {
        if (r) r.release();
      } catch {
        // already released with a disposed isolate
      }
    }
    if (!iso.isDisposed) {
      try {
        const h = iso.getHeapStatisticsSync();
        if (h.used_heap_size > (isolateLimitMb * 1024 * 1024) / 2) {
          iso.dispose();
          isolate = null;
        }
      } catch {
        isolate = null;
      }
    }
  }
}

process.on('message', (msg) => {
  if (!msg || typeof msg !== 'object') return;
  if (msg.type === 'run') {
    run(msg).then(
      (r) => send({ type: 'result', id: msg.id, ...r }),
      (e) =>
        send({
          type: 'result',
          id: msg.id,
          ok: false,
          code: 'SANDBOX_CRASHED',
          message: String(e && e.message),
          fatal: true,
          logs: [],
        }),
    );
  } else if (msg.type === 'fetchResult') {
    const pending = pendingFetches.get(msg.reqId);
    pendingFetches.delete(msg.reqId);
    if (pending) pending.resolve(msg.result);
  }
});

// The parent going away (crash, kill) ends this process; it is never left running on its own.
process.on('disconnect', () => process.exit(0));
send({ type: 'ready' });
