import { z } from 'zod';
import {
  definePlugin,
  type JsonObject,
  type JsonValue,
  type PluginContext,
  type PluginResult,
} from '../../src/modules/plugins/plugin';
import { egressRequest, RequestError } from '../../src/modules/sandbox/egress-http';
import { redactJson } from '../../src/modules/sandbox/redact-json';
import type { ScriptFailureCode } from '../../src/modules/sandbox/script-pool';

const MIB = 1024 * 1024;
const num = (min: number, max: number) => z.union([z.number().int().min(min).max(max), z.string().min(1)]);

const config = z.strictObject({
  /** The body of an async function of (inputs, steps); its return value (JSON) is the step's output. */
  code: z.string().min(1).max(MIB),
  /** Values the script sees as `inputs` (typically templated from the run's inputs). */
  inputs: z.unknown().optional(),
  /** Values the script sees as `steps` (typically templated from upstream outputs). */
  steps: z.unknown().optional(),
  /** Wall-time limit; defaults to the step's timeout, at most 60 s unless set. */
  timeoutMs: num(1, 3_600_000).optional(),
  memoryLimitMb: num(8, 1024).default(64),
  maxOutputBytes: num(2, 16 * MIB).default(MIB),
  /** Response size limit of each `fetch` inside the script. */
  maxFetchBytes: num(0, 16 * MIB).default(MIB),
});

type ScriptConfig = z.output<typeof config>;

const FAILURES: Record<ScriptFailureCode, { retryable: boolean }> = {
  SCRIPT_ERROR: { retryable: false },
  SCRIPT_TIMEOUT: { retryable: false },
  SCRIPT_MEMORY: { retryable: false },
  OUTPUT_TOO_LARGE: { retryable: false },
  SANDBOX_CRASHED: { retryable: true },
  ABORTED: { retryable: false },
};

function int(v: number | string | undefined, fallback: number, name: string, min: number, max: number): number {
  if (v === undefined) return fallback;
  const n = typeof v === 'number' ? v : Number(v);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new InvalidConfig(name, `${name} must be an integer between ${min} and ${max}, got ${String(v)}`);
  return n;
}

class InvalidConfig extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

/** Runs a script's `fetch` in this process, under the step's egress list; answers JSON text for the isolate. */
async function bridgeFetch(
  url: string,
  initJson: string,
  ctx: PluginContext,
  deadline: number,
  maxBytes: number,
): Promise<string> {
  let init: { method?: unknown; headers?: unknown; body?: unknown };
  try {
    init = JSON.parse(initJson) as typeof init;
  } catch {
    init = {};
  }
  // No prototype: a header the script names `__proto__` is kept like any other.
  const headers = Object.create(null) as Record<string, string>;
  if (init.headers && typeof init.headers === 'object') {
    for (const [k, v] of Object.entries(init.headers as Record<string, unknown>)) headers[k.toLowerCase()] = String(v);
  }
  headers.traceparent ??= ctx.traceparent;
  const method = typeof init.method === 'string' ? init.method.toUpperCase() : 'GET';
  let body: string | undefined;
  if (init.body !== undefined && init.body !== null) {
    body = typeof init.body === 'string' ? init.body : JSON.stringify(init.body);
    if (typeof init.body !== 'string') headers['content-type'] ??= 'application/json';
  }
  try {
    const res = await egressRequest({
      method,
      url,
      headers,
      body,
      egress: ctx.egress,
      signal: ctx.signal,
      timeoutMs: Math.max(1, deadline - Date.now()),
      maxResponseBytes: maxBytes,
      policy: ctx.sandbox.egress,
    });
    ctx.log('info', ctx.redact(`fetch ${method} ${res.url} -> ${res.status} (${res.body.length} bytes)`));
    const h: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h[k] = Array.isArray(v) ? v.join(', ') : v;
    return JSON.stringify({ status: res.status, headers: h, body: res.body.toString('utf8'), url: res.url });
  } catch (e) {
    const err = e instanceof RequestError ? e : new RequestError('NETWORK_ERROR', (e as Error).message, true);
    ctx.log('warn', ctx.redact(`fetch ${method} ${url} failed: ${err.code}: ${err.message}`));
    return JSON.stringify({ error: { code: err.code, message: ctx.redact(err.message) } });
  }
}

async function run(cfg: ScriptConfig, ctx: PluginContext): Promise<PluginResult> {
  const timeoutMs = int(cfg.timeoutMs, Math.min(ctx.timeoutMs, 60_000), 'timeoutMs', 1, 3_600_000);
  const maxOutputBytes = int(cfg.maxOutputBytes, MIB, 'maxOutputBytes', 2, 16 * MIB);
  const maxFetchBytes = int(cfg.maxFetchBytes, MIB, 'maxFetchBytes', 0, 16 * MIB);
  const deadline = Date.now() + timeoutMs;
  // The run's inputs and upstream outputs (from the engine) are used when the config does not name them.
  const pool = ctx.sandbox.scripts();
  if (pool.sandboxProblem)
    ctx.log('warn', `WARNING: the script's sandbox process runs without bubblewrap: ${pool.sandboxProblem}`);
  const outcome = await pool.run(
    {
      code: cfg.code,
      inputsJson: JSON.stringify(cfg.inputs ?? ctx.inputs ?? {}),
      stepsJson: JSON.stringify(cfg.steps ?? ctx.steps ?? {}),
      memoryLimitMb: int(cfg.memoryLimitMb, 64, 'memoryLimitMb', 8, 1024),
      timeoutMs,
      maxOutputBytes,
      maxLogLines: 1000,
      maxLogLineBytes: 8192,
      maxFetches: 100,
    },
    { signal: ctx.signal, fetch: (url, init) => bridgeFetch(url, init, ctx, deadline, maxFetchBytes) },
  );
  for (const l of outcome.logs) ctx.log(l.level, ctx.redact(l.message));
  if (outcome.dropped > 0) ctx.log('warn', `${outcome.dropped} more console lines were dropped (limit 1000 per step)`);
  if (!outcome.ok) {
    return {
      status: 'failed',
      error: { code: outcome.code, message: ctx.redact(outcome.message), retryable: FAILURES[outcome.code].retryable },
    };
  }
  if (Buffer.byteLength(outcome.json, 'utf8') > maxOutputBytes) {
    return {
      status: 'failed',
      error: {
        code: 'OUTPUT_TOO_LARGE',
        message: `the result exceeds the limit of ${maxOutputBytes} bytes`,
        retryable: false,
      },
    };
  }
  const value = redactJson(JSON.parse(outcome.json) as JsonValue, (t) => ctx.redact(t));
  const outputs: JsonObject =
    value !== null && typeof value === 'object' && !Array.isArray(value) ? value : { result: value };
  return { status: 'succeeded', outputs };
}

/**
 * Runs JavaScript in an isolated-vm isolate inside a pooled sandbox process. `code` is the body of
 * an async function of `(inputs, steps)`; a returned object becomes the step's outputs, any other
 * JSON value is returned as `{ result }`. `console.*` goes to the step log; `fetch` reaches only
 * the step's egress hosts.
 */
export default definePlugin({
  name: 'script',
  receivesRunData: true,
  // Its only way out of the isolate is `fetch`, which reaches only the step's egress hosts.
  sideEffectFree: true,
  description:
    'Runs JavaScript in an isolated-vm sandbox process with memory and time limits; returns its JSON result.',
  configSchema: config,
  async execute(cfg, ctx) {
    try {
      return await run(cfg, ctx);
    } catch (e) {
      if (e instanceof InvalidConfig)
        // Its config passed the schema at publish: a value that fails now came from the run's data.
        return {
          status: 'failed',
          error: {
            code: 'INVALID_CONFIG',
            message: e.message,
            retryable: false,
            class: 'invalid_input',
            input: `with.${e.field}`,
          },
        };
      throw e;
    }
  },
});
