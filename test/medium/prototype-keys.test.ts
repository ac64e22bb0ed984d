import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import httpPlugin from '../../plugins/http/index';
import { canonicalJson } from '../../src/core/json/canonical-json';
import { compileInputSchema } from '../../src/modules/dags/input-schema';
import { redactSecrets } from '../../src/modules/export/export-format';
import { egressPolicy } from '../../src/modules/sandbox/egress';
import { egressRequest } from '../../src/modules/sandbox/egress-http';
import { startEgressProxy } from '../../src/modules/sandbox/egress-proxy';
import { closeTestSandboxes, pluginContext } from '../../src/modules/sandbox/testing/plugin-context';
import { CronError, parseCron } from '../../src/modules/scheduler/cron';
import { PROTOTYPE_KEYS } from '../support/fuzz/arbitrary-from-schema';

/**
 * Functions that look values up by caller-given names, called directly: a name of an
 * Object.prototype member is an ordinary name there, never one of Object's members.
 */
describe('prototype member names as keys', () => {
  it.each(PROTOTYPE_KEYS)('parses the cron expression %p as a malformed one-field expression', (name) => {
    for (const expr of [name, name.toUpperCase(), `  ${name}  `]) {
      expect(() => parseCron(expr)).toThrow(new CronError('INVALID_CRON', 'expected 5 or 6 fields, got 1'));
    }
  });

  it('keeps a config key named __proto__ when redacting an exported step config, redacting inside it', () => {
    const config = JSON.parse(
      '{"output":{"__proto__":{"token":"t0p","kept":1},"constructor":{"password":"p"},"toString":"x"}}',
    ) as unknown;
    const out = redactSecrets(config);
    expect(canonicalJson(out)).toBe(
      '{"output":{"__proto__":{"kept":1,"token":"[redacted]"},"constructor":{"password":"[redacted]"},"toString":"x"}}',
    );
    expect(Object.getPrototypeOf((out as { output: object }).output)).toBe(Object.prototype);
  });

  it('validates run inputs against declared prototype member names by own keys only, at any depth', () => {
    const schema = compileInputSchema({
      type: 'object',
      properties: {
        constructor: { type: 'string' },
        nested: {
          type: 'object',
          properties: { toString: { type: 'string' }, hasOwnProperty: { type: 'number' } },
          required: ['hasOwnProperty'],
        },
        list: { type: 'array', items: { type: 'object', properties: { valueOf: { type: 'boolean' } } } },
      },
      required: ['constructor'],
    });
    const issuesOf = (inputs: unknown) => {
      const r = schema.safeParse(inputs);
      return r.success ? [] : r.error.issues.map((i) => i.path.join('.'));
    };
    expect(issuesOf({})).toEqual(['constructor']);
    expect(issuesOf({ constructor: 'c', nested: {} })).toEqual(['nested.hasOwnProperty']);
    expect(issuesOf({ constructor: 'c', nested: { hasOwnProperty: 1 }, list: [{}, { valueOf: true }] })).toEqual([]);
    expect(issuesOf({ constructor: 'c', list: [{ valueOf: 'no' }] })).toEqual(['list.0.valueOf']);
  });

  it('validates deeply nested run inputs without exhausting the stack', () => {
    const schema = compileInputSchema({ type: 'object', properties: { a: {} } });
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = { a: deep };
    expect(schema.safeParse({ a: deep }).success).toBe(true);
  });
});

describe('prototype member names as HTTP header names on the way out of a step', () => {
  let server: http.Server;
  let port = 0;
  /** The raw header pairs of each request the upstream received, minus the ones every client sends. */
  let received: string[][] = [];
  const named = (raw: string[]) => {
    const out: string[] = [];
    for (let i = 0; i < raw.length; i += 2) {
      if (['toString', 'constructor', '__proto__', 'x-own'].includes(raw[i])) out.push(`${raw[i]}: ${raw[i + 1]}`);
    }
    return out;
  };

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      received.push(named(req.rawHeaders));
      const headers: [string, string][] = [
        ['content-type', 'text/plain'],
        ['content-length', '2'],
      ];
      if (req.url?.endsWith('/with-constructor')) headers.push(['constructor', 'sent']);
      res.writeHead(200, headers.flat()).end('ok');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await closeTestSandboxes();
  });
  beforeEach(() => (received = []));

  it('copies into the http plugin outputs only response headers the upstream sent', async () => {
    const egress = [`127.0.0.1:${port}`];
    const run = async (p: string) => {
      const cfg = httpPlugin.configSchema.parse({
        url: `http://127.0.0.1:${port}${p}`,
        outputHeaders: ['constructor', '__proto__', 'toString', 'hasOwnProperty'],
      });
      const r = await httpPlugin.execute(cfg, pluginContext({ egress }));
      return (r.outputs as { headers: Record<string, unknown> }).headers;
    };
    const without = await run('/plain');
    expect(Object.keys(without).sort()).toEqual(['content-length', 'content-type']);
    expect(Object.values(without).every((v) => typeof v === 'string')).toBe(true);
    const withOne = await run('/with-constructor');
    expect(withOne).toEqual({ 'content-length': '2', 'content-type': 'text/plain', constructor: 'sent' });
  });

  it('sends request headers named __proto__ and constructor as given', async () => {
    const headers = Object.fromEntries([
      ['__proto__', 'p'],
      ['constructor', 'c'],
      ['x-own', 'o'],
    ]) as Record<string, string>;
    const res = await egressRequest({
      method: 'GET',
      url: `http://127.0.0.1:${port}/plain`,
      headers,
      egress: [`127.0.0.1:${port}`],
      policy: egressPolicy(['127.0.0.1']),
      signal: new AbortController().signal,
      timeoutMs: 5_000,
      maxResponseBytes: 1024,
    });
    expect(res.status).toBe(200);
    expect(received[0].sort()).toEqual(['__proto__: p', 'constructor: c', 'x-own: o']);
  });

  it('forwards through the egress proxy headers named toString, constructor and __proto__ unchanged', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-proxy-'));
    const socketPath = path.join(dir, 'egress.sock');
    const proxy = await startEgressProxy({
      socketPath,
      egress: [`127.0.0.1:${port}`],
      policy: egressPolicy(['127.0.0.1']),
      log: () => undefined,
    });
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(
          {
            socketPath,
            method: 'GET',
            path: `http://127.0.0.1:${port}/plain`,
            headers: Object.fromEntries([
              ['toString', 't'],
              ['constructor', 'c'],
              ['__proto__', 'p'],
              ['x-own', 'o'],
            ]) as http.OutgoingHttpHeaders,
          },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          },
        );
        req.on('error', reject);
        req.end();
      });
      expect(status).toBe(200);
      expect(received[0].sort()).toEqual(['__proto__: p', 'constructor: c', 'toString: t', 'x-own: o']);
    } finally {
      await proxy.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
