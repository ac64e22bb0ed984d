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
// its limit, when a step ends with a `fetch` unanswered, and whenever a step failed with a timeout or
// memory error (the process is replaced then).
// Nothing but JSON strings crosses the boundary: inputs go in as JSON text parsed inside the
// isolate, the outcome comes out as text (the result's JSON or the description of what the script
// threw), console lines as strings.
//
// No value of the script is ever thrown across the boundary. isolated-vm copies a value thrown out
// of the isolate, and a rejection left unhandled, by reading its `message`, `stack` and `name` and
// converting them to strings outside the isolate's time limit (a synchronous call from the host
// waits for it), so a getter or an `Error.prepareStackTrace` of the script would run there
// unbounded. Instead, what the script throws or rejects with is described inside the isolate
// (BOOTSTRAP's `describeThrown`), and the outcome reaches the host through the `done` callback.
// isolated-vm reads only the FIRST rejection left unhandled since its previous task in the isolate;
// every stretch of isolate work that can run the script's code therefore starts by leaving a GUARD
// rejection unhandled (the step's start, each resumption after a `fetch`), so that fixed string is
// what it reads, and rejections the script leaves unhandled are ignored. The host expects GUARD at
// the end of the step's evaluation and of the heap check after it. The step's code is checked to be
// a single function body before it is wrapped, so none of it runs ahead of its guard, and no code of
// a step runs after the step has ended (see the unanswered fetches in `run`).

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

const GUARD = '\u0000GUARD';
const TOO_LARGE = '\u0000TOO_LARGE:';
const THROWN = '\u0000THROWN:';
const MAX_MESSAGE = 4000;

// Runs in each step's fresh context before the step's code and returns the `settle` function the
// wrapper calls with it, and `lifetime`; its bindings are out of the step's reach. The builtins it uses are taken
// here, before any code of the step runs, so a script that replaces `JSON.stringify`,
// `String.prototype.slice` or `Array.prototype.join` changes only its own calls. It never converts
// an object of the script to a string implicitly; the getters, `toString`s and
// `Error.prepareStackTrace` it does trigger run in the isolate, within its limits.
const BOOTSTRAP = `
const log = $0;
const hostFetch = $1;
const done = $2;
const maxLine = $3;
const maxOutput = $4;
const inputsJson = $5;
const stepsJson = $6;
const apply = Reflect.apply;
const hasInstance = Function.prototype[Symbol.hasInstance];
const ErrorClass = Error;
const toString = String;
const stringify = JSON.stringify;
const parse = JSON.parse;
const sliceString = String.prototype.slice;
const mapArray = Array.prototype.map;
const joinArray = Array.prototype.join;
const addToSet = Set.prototype.add;
const defineProperty = Object.defineProperty;
const freeze = Object.freeze;

// Guard rejections stay referenced (and unhandled) for the life of the context.
const guards = new Set();
const rejectWithGuard = async () => {
  throw ${JSON.stringify(GUARD)};
};
const guard = () => {
  apply(addToSet, guards, [rejectWithGuard()]);
};

const clip = (s, max) => (s.length > max ? apply(sliceString, s, [0, max]) + '…' : s);
const isError = (v) => {
  try {
    return apply(hasInstance, ErrorClass, [v]) === true;
  } catch {
    return false;
  }
};
const readString = (o, key) => {
  try {
    const v = o[key];
    return typeof v === 'string' ? v : undefined;
  } catch {
    return undefined;
  }
};
// "name: message", then the stack when it is a string (V8's own stack already starts with that line).
const describeError = (e, message) => {
  const name = readString(e, 'name') || 'Error';
  if (message === undefined) return name + ' (its message is not a string)';
  const head = message ? name + ': ' + message : name;
  const stack = isError(e) ? readString(e, 'stack') : undefined;
  if (!stack) return head;
  return apply(sliceString, stack, [0, head.length]) === head ? stack : head + '\\n' + stack;
};
const describeThrown = (v) => {
  const type = v === null ? 'null' : typeof v;
  if (type === 'object' || type === 'function') {
    const message = readString(v, 'message');
    if (message !== undefined || isError(v)) return describeError(v, message);
  }
  const what = 'the script threw a value that is not an Error (' + type + ')';
  if (type === 'string' || type === 'number' || type === 'boolean' || type === 'bigint') return what + ': ' + v;
  return what;
};
const formatLogValue = (v) => {
  if (typeof v === 'string') return v;
  if (isError(v)) return describeError(v, readString(v, 'message'));
  try {
    const s = stringify(v);
    if (typeof s === 'string') return s;
  } catch {
    // printed with String() below
  }
  try {
    return toString(v);
  } catch {
    return '[unprintable]';
  }
};

const mk = (level) => function (...args) {
  const line = clip(apply(joinArray, apply(mapArray, args, [(v) => formatLogValue(v)]), [' ']), maxLine);
  log.applyIgnored(undefined, [level, line]);
};
const console = freeze({ log: mk('info'), info: mk('info'), debug: mk('debug'), warn: mk('warn'), error: mk('error') });
defineProperty(globalThis, 'console', { value: console, writable: false, configurable: false, enumerable: false });
const makeResponse = (r) => {
  const headers = r.headers;
  return freeze({
    status: r.status,
    ok: r.status >= 200 && r.status < 300,
    url: r.url,
    headers: freeze({ get: (name) => headers[String(name).toLowerCase()] ?? null }),
    text: async () => r.body,
    json: async () => JSON.parse(r.body),
  });
};
async function fetch(url, init) {
  const req = init == null ? {} : { method: init.method, headers: init.headers, body: init.body };
  let raw;
  try {
    raw = await hostFetch.apply(undefined, [String(url), JSON.stringify(req)], { result: { promise: true } });
  } finally {
    // The first code to run when the host answers: the script's code resumes after the guard.
    guard();
  }
  const r = parse(raw);
  if (r.error) {
    const e = new Error(r.error.code + ': ' + r.error.message);
    e.code = r.error.code;
    throw e;
  }
  return makeResponse(r);
}
defineProperty(globalThis, 'fetch', { value: fetch, writable: false, configurable: false, enumerable: false });

// Runs the step's function and hands its outcome to the host: the result's JSON (an oversize one
// never crosses the boundary), TOO_LARGE with its length, or THROWN with a description.
const settle = async (script) => {
  guard();
  let outcome;
  try {
    const v = await apply(script, undefined, [parse(inputsJson), parse(stepsJson)]);
    const s = stringify(v === undefined ? null : v);
    if (typeof s !== 'string') outcome = 'null';
    else if (s.length > maxOutput) outcome = ${JSON.stringify(TOO_LARGE)} + s.length;
    else outcome = s;
  } catch (e) {
    try {
      outcome = ${JSON.stringify(THROWN)} + clip(describeThrown(e), ${MAX_MESSAGE});
    } catch {
      outcome = ${JSON.stringify(THROWN)} + 'the script threw a value that cannot be described';
    }
  }
  done.applyIgnored(undefined, [outcome]);
};
// Never settles: isolated-vm rejects the host's copy when the isolate is disposed (its memory limit).
const lifetime = new Promise(() => {});
return { settle, lifetime };
`;

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

const AsyncFunction = (async () => {}).constructor;

// The step's code is the body of an async function of (inputs, steps), handed to BOOTSTRAP's `settle` ($0).
function wrap(code) {
  return `$0(async function (inputs, steps) {\n${code}\n});`;
}

// The step's code parsed (never run) on its own as an async function body: a `}` that closes the
// wrapper's function early, to run code outside it and ahead of its guard, is a syntax error here.
function syntaxError(code) {
  try {
    void new AsyncFunction('inputs', 'steps', code);
    return undefined;
  } catch (e) {
    return `${e.name}: ${e.message}`.slice(0, MAX_MESSAGE);
  }
}

// The heap check is the isolate's first task after the step: it reports the guard of the step's
// last stretch of work when there was one (see GUARD), and a second call finds nothing left.
function heapStatistics(iso) {
  try {
    return iso.getHeapStatisticsSync();
  } catch (e) {
    if (e !== GUARD) throw e;
    return iso.getHeapStatisticsSync();
  }
}

function retire(iso) {
  if (!iso.isDisposed) iso.dispose();
  if (isolate === iso) isolate = null;
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
  return { code: 'SCRIPT_ERROR', message: stack.slice(0, MAX_MESSAGE), fatal: false };
}

async function run(job) {
  const logs = [];
  let dropped = 0;
  const invalid = syntaxError(job.code);
  if (invalid !== undefined) return { ok: false, code: 'SCRIPT_ERROR', message: invalid, fatal: false, logs, dropped };
  const iso = getIsolate(job.memoryLimitMb);
  let context;
  let logRef;
  let fetchRef;
  let doneRef;
  let bootRef;
  let settleRef;
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
    let finish;
    const finished = new Promise((resolve) => (finish = resolve));
    doneRef = new ivm.Reference((outcome) => finish(String(outcome)));
    bootRef = await context.evalClosure(
      BOOTSTRAP,
      [logRef, fetchRef, doneRef, job.maxLogLineBytes, job.maxOutputBytes, job.inputsJson, job.stepsJson],
      { result: { reference: true } },
    );
    settleRef = await bootRef.get('settle', { reference: true });
    // Rejects when the isolate is disposed while the step's code waits on a fetch (its memory limit).
    const disposed = bootRef.get('lifetime', { promise: true });
    const timeout = new Promise((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error('Script execution timed out.')), job.timeoutMs);
    });
    // The evaluation ends with the step's guard reported; the outcome arrives through `done`.
    const evaluation = context.evalClosure(wrap(job.code), [settleRef.derefInto()], { timeout: job.timeoutMs }).then(
      () => finished,
      (e) => {
        if (e !== GUARD) throw e;
        return finished;
      },
    );
    const out = await Promise.race([evaluation, timeout, disposed]);
    if (out.startsWith(TOO_LARGE)) {
      return {
        ok: false,
        code: 'OUTPUT_TOO_LARGE',
        message: `the result (${out.slice(TOO_LARGE.length)} characters of JSON) exceeds the limit of ${job.maxOutputBytes} bytes`,
        logs,
        dropped,
      };
    }
    if (out.startsWith(THROWN)) {
      return { ok: false, code: 'SCRIPT_ERROR', message: out.slice(THROWN.length), fatal: false, logs, dropped };
    }
    return { ok: true, json: out, logs, dropped };
  } catch (e) {
    const c = classify(e, iso);
    return { ok: false, code: c.code, message: c.message, fatal: c.fatal, logs, dropped };
  } finally {
    clearTimeout(timer);
    // A fetch the script left unawaited is answered here (the parent ignores the answer), once its
    // isolate is disposed: the answer would otherwise resume the step's code after the step.
    const unanswered = [...pendingFetches].filter(([, pending]) => pending.job === job.id);
    if (unanswered.length > 0) retire(iso);
    for (const [reqId, pending] of unanswered) {
      pendingFetches.delete(reqId);
      pending.resolve(JSON.stringify({ error: { code: 'STEP_ENDED', message: 'the step has ended' } }));
    }
    for (const r of [logRef, fetchRef, doneRef, settleRef, bootRef, context]) {
      try {
        if (r) r.release();
      } catch {
        // already released with a disposed isolate
      }
    }
    if (!iso.isDisposed) {
      try {
        const h = heapStatistics(iso);
        if (h.used_heap_size > (isolateLimitMb * 1024 * 1024) / 2) retire(iso);
      } catch {
        retire(iso);
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
