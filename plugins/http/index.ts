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

const MIB = 1024 * 1024;
/** A number, or a template string resolved before execution. */
const num = (min: number, max: number) => z.union([z.number().int().min(min).max(max), z.string().min(1)]);
/** `200`, `"2xx"`, `"200-299"`, or a template. */
const statusSpec = z.union([
  z.number().int().min(100).max(599),
  z.string().regex(/^([1-5]xx|\d{3}(-\d{3})?|\$\{\{.*\}\})$/),
]);

const config = z.strictObject({
  method: z
    .string()
    .regex(/^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS|\$\{\{.*\}\})$/i)
    .default('GET'),
  url: z.string().min(1).max(8192),
  headers: z.record(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/), z.string().max(16_384)).default({}),
  /** A string is sent as text; any other JSON value as JSON. */
  body: z.unknown().optional(),
  /** Defaults to the step's timeout. */
  timeoutMs: num(1, 3_600_000).optional(),
  maxResponseBytes: num(0, 64 * MIB).default(MIB),
  /** Accepted statuses; anything else fails the step (HTTP_STATUS). Default: any 2xx. */
  expectStatus: z.array(statusSpec).min(1).max(50).default(['2xx']),
  /** `auto` parses JSON when the response says it is JSON, and returns text otherwise. */
  responseType: z.enum(['json', 'text', 'auto']).default('auto'),
  followRedirects: z.union([z.boolean(), z.string()]).default(true),
  /** Response headers copied into the outputs (besides content-type, etag, last-modified, location). */
  outputHeaders: z.array(z.string().max(256)).max(50).default([]),
});

type HttpConfig = z.output<typeof config>;

const DEFAULT_HEADERS = ['content-type', 'content-length', 'etag', 'last-modified', 'location'];

function toInt(v: number | string | undefined, fallback: number, name: string): number {
  if (v === undefined) return fallback;
  const n = typeof v === 'number' ? v : Number(v);
  if (!Number.isInteger(n) || n < 0)
    throw new ConfigError(name, `${name} must be a non-negative integer, got ${String(v)}`);
  return n;
}

class ConfigError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

/** True when `status` matches one of the specs (200, "2xx", "200-204"). */
export function statusMatches(status: number, specs: readonly (number | string)[]): boolean {
  return specs.some((s) => {
    if (typeof s === 'number') return s === status;
    const range = /^(\d{3})-(\d{3})$/.exec(s);
    if (range) return status >= Number(range[1]) && status <= Number(range[2]);
    if (/^[1-5]xx$/.test(s)) return Math.floor(status / 100) === Number(s[0]);
    return /^\d{3}$/.test(s) && Number(s) === status;
  });
}

/** 5xx, 408 (request timeout) and 429 (too many requests) are worth retrying; other statuses are not. */
function retryableStatus(status: number): boolean {
  return status >= 500 || status === 408 || status === 429;
}

async function run(cfg: HttpConfig, ctx: PluginContext): Promise<PluginResult> {
  const method = cfg.method.toUpperCase();
  const timeoutMs = toInt(cfg.timeoutMs, ctx.timeoutMs, 'timeoutMs');
  const maxResponseBytes = toInt(cfg.maxResponseBytes, MIB, 'maxResponseBytes');
  const follow = cfg.followRedirects === true || cfg.followRedirects === 'true';

  const headers: Record<string, string> = {
    'user-agent': 'ordo',
    accept: 'application/json, text/plain;q=0.9, */*;q=0.8',
  };
  for (const [k, v] of Object.entries(cfg.headers)) headers[k.toLowerCase()] = v;
  headers.traceparent ??= ctx.traceparent;
  let body: string | undefined;
  if (cfg.body !== undefined && cfg.body !== null) {
    if (typeof cfg.body === 'string') {
      body = cfg.body;
      headers['content-type'] ??= 'text/plain; charset=utf-8';
    } else {
      body = JSON.stringify(cfg.body);
      headers['content-type'] ??= 'application/json';
    }
  }

  const started = Date.now();
  const res = await egressRequest({
    method,
    url: cfg.url,
    headers,
    body,
    egress: ctx.egress,
    policy: ctx.sandbox.egress,
    signal: ctx.signal,
    timeoutMs,
    maxResponseBytes,
    maxRedirects: follow ? 5 : 0,
  });

  const text = res.body.toString('utf8');
  const contentType = String(res.headers['content-type'] ?? '');
  let parsed: JsonValue = text;
  const looksJson = /[/+]json\b/i.test(contentType);
  if (cfg.responseType === 'json' || (cfg.responseType === 'auto' && looksJson)) {
    try {
      parsed = text.length === 0 ? null : (JSON.parse(text) as JsonValue);
    } catch {
      if (cfg.responseType === 'json') {
        return {
          status: 'failed',
          error: { code: 'RESPONSE_NOT_JSON', message: `response of ${res.url} is not JSON`, retryable: false },
        };
      }
    }
  }
  const outHeaders: JsonObject = {};
  for (const name of [...DEFAULT_HEADERS, ...cfg.outputHeaders.map((h) => h.toLowerCase())]) {
    // Own headers only: a name such as `constructor` must not find Object's members.
    const v = Object.hasOwn(res.headers, name) ? res.headers[name] : undefined;
    if (v !== undefined) outHeaders[name] = Array.isArray(v) ? v.join(', ') : v;
  }
  const outputs = redactJson<JsonObject>({ status: res.status, headers: outHeaders, body: parsed }, (t) =>
    ctx.redact(t),
  );
  ctx.log(
    'info',
    ctx.redact(`${method} ${res.url} -> ${res.status} in ${Date.now() - started} ms (${res.body.length} bytes)`),
  );

  if (!statusMatches(res.status, cfg.expectStatus)) {
    return {
      status: 'failed',
      outputs,
      error: {
        code: 'HTTP_STATUS',
        message: ctx.redact(`${method} ${res.url} answered ${res.status}, expected ${cfg.expectStatus.join(', ')}`),
        retryable: retryableStatus(res.status),
      },
    };
  }
  return { status: 'succeeded', outputs };
}

/** Calls a URL under the step's egress policy and returns {status, headers, body}. */
export default definePlugin({
  name: 'http',
  description:
    'Calls an HTTP(S) URL reachable under the step egress list; returns status, selected headers and the body.',
  configSchema: config,
  async execute(cfg, ctx) {
    try {
      return await run(cfg, ctx);
    } catch (e) {
      if (e instanceof RequestError) {
        ctx.log('warn', ctx.redact(`${cfg.method.toUpperCase()} ${cfg.url} failed: ${e.code}: ${e.message}`));
        return { status: 'failed', error: { code: e.code, message: ctx.redact(e.message), retryable: e.retryable } };
      }
      if (e instanceof ConfigError)
        return {
          status: 'failed',
          // Its config passed the schema at publish: a value that fails now came from the run's data.
          error: {
            code: 'INVALID_CONFIG',
            message: ctx.redact(e.message),
            retryable: false,
            class: 'invalid_input',
            input: `with.${e.field}`,
          },
        };
      throw e;
    }
  },
});
