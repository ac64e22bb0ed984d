import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { sql } from 'kysely';
import { SigningKeys } from '../../src/modules/auth/signing-keys';
import { canonicalJson } from '../../src/core/json/canonical-json';
import {
  JWS_FILE,
  KEY_FILE,
  MANIFEST_FILE,
  NDJSON_FILE,
  formatLine,
  lineHash,
  splitLine,
} from '../../src/modules/export/export-format';
import { runSpanId } from '../../src/core/telemetry/tracing';
import { verifyExport } from '../../src/modules/export/export-verify';
import { ExportRepository } from '../../src/modules/export/export.repository';
import { PlansRepository } from '../../src/modules/plans/plans.repository';
import { QuotaChecks } from '../../src/modules/plans/quota-checks';
import { TenantLimits } from '../../src/modules/plans/tenant-limits';
import { ExportService, parseRange, type SignedManifest } from '../../src/modules/export/export.service';
import { DomainError } from '../../src/core/errors/domain-error';
import { appendEvents, insertRun, insertStepWithAttempt, type FactoryRun } from '../factories/run-events';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('NDJSON export', () => {
  let t: TestDatabase;
  let keys: SigningKeys;
  let service: ExportService;
  let tmp: string;
  const runsA: FactoryRun[] = [];
  const SECRET = 'sk-live-export-secret-4711';

  async function exportTo(
    dir: string,
    tenant: string,
    req: { from?: string; to?: string; dagId?: string } = {},
  ): Promise<SignedManifest> {
    fs.mkdirSync(dir, { recursive: true });
    const file = fs.createWriteStream(path.join(dir, NDJSON_FILE));
    const it = service.lines(tenant, parseRange(req));
    let r = await it.next();
    while (!r.done) {
      if (!file.write(r.value)) await once(file, 'drain');
      r = await it.next();
    }
    file.end();
    await once(file, 'finish');
    fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(r.value.manifest, null, 2));
    fs.writeFileSync(path.join(dir, JWS_FILE), r.value.jws);
    fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(r.value.publicJwk));
    return r.value;
  }

  const lines = (dir: string) =>
    fs
      .readFileSync(path.join(dir, NDJSON_FILE), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, any>);

  beforeAll(async () => {
    t = await createTestDatabase();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-export-'));
    keys = await SigningKeys.open(path.join(tmp, 'keys'), { create: true });
    service = new ExportService(
      t.db,
      new ExportRepository(),
      keys,
      new QuotaChecks(t.db, new PlansRepository(), new TenantLimits(t.db)),
    );
    const db = t.db.system;
    await db
      .insertInto('tenant')
      .values([
        { id: 'exp-a', name: 'a' },
        { id: 'exp-b', name: 'b' },
      ])
      .execute();
    // Runs out of insertion order: export order is (startedUtc, dagId, runId).
    const day = (h: number) => new Date(Date.UTC(2026, 0, 10, h));
    const specs: [string, Date][] = [
      ['zeta', day(3)],
      ['alpha', day(1)],
      ['beta', day(1)],
      ['alpha', day(2)],
    ];
    for (const [dag, at] of specs) {
      const run = await insertRun(db, 'exp-a', dag, {
        createdAt: new Date(at.getTime() - 1000),
        startedAt: at,
        finishedAt: new Date(at.getTime() + 5000),
        status: 'succeeded',
        inputs: { n: 1 },
      });
      await appendEvents(db, run, [
        { type: 'run.created', createdAt: at },
        { type: 'run.running', createdAt: at },
        { type: 'step.succeeded', stepId: 'one', attempt: 1, data: { outputsHash: 'f'.repeat(64) }, createdAt: at },
        { type: 'run.succeeded', createdAt: at },
      ]);
      await insertStepWithAttempt(db, run, 'one', {
        config: { url: 'https://x.test', password: SECRET },
        logs: `log of ${run.runId}\n`,
        at: new Date(at.getTime() + 4000),
      });
      // Step and run spans stored before the export derived them: left out (no duplicates).
      for (const name of ['orchestrator.step', 'orchestrator.run'])
        await db
          .insertInto('span')
          .values({
            tenant_id: 'exp-a',
            trace_id: run.traceId,
            span_id: createHash('sha256').update(`${name}:${run.runId}`).digest('hex').slice(0, 16),
            parent_span_id: null,
            name,
            kind: 0,
            run_id: run.runId,
            step_id: null,
            started_at: at,
            ended_at: new Date(at.getTime() + 5000),
            status_code: 1,
            status_message: null,
            attributes: JSON.stringify({ tenant: 'exp-a', runId: run.runId }),
          })
          .execute();
      runsA.push(run);
    }
    const runB = await insertRun(db, 'exp-b', 'alpha', { startedAt: day(1) });
    await appendEvents(db, runB, [{ type: 'run.created', createdAt: day(1) }]);
  });

  afterAll(async () => {
    await t.drop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('writes runs in (startedUtc, dagId, runId) order, each followed by its events, steps, attempts, logs, metrics and spans', async () => {
    const dir = path.join(tmp, 'all');
    const signed = await exportTo(dir, 'exp-a');
    const recs = lines(dir);
    const runs = recs.filter((r) => r.type === 'run');
    expect(runs.map((r) => [r.startedUtc, r.dagId])).toEqual([
      ['2026-01-10T01:00:00.000Z', 'alpha'],
      ['2026-01-10T01:00:00.000Z', 'beta'],
      ['2026-01-10T02:00:00.000Z', 'alpha'],
      ['2026-01-10T03:00:00.000Z', 'zeta'],
    ]);
    const firstRun = recs.slice(
      0,
      recs.findIndex((r, i) => i > 0 && r.type === 'run'),
    );
    expect(firstRun.map((r) => r.type)).toEqual([
      'run',
      'event',
      'event',
      'event',
      'event',
      'step',
      'attempt',
      'log',
      'metric',
      'metric',
      'metric',
      'metric',
      'span',
      'span',
      'span',
    ]);
    // The run's span and the attempt's step span, derived from their rows, then its plugin call's, stored.
    const [runSpan, step, call] = firstRun.filter((r) => r.type === 'span');
    const attempt = firstRun.find((r) => r.type === 'attempt')!;
    expect(runSpan).toMatchObject({
      type: 'span',
      runId: firstRun[0].runId,
      traceId: firstRun[0].traceId,
      spanId: runSpanId(firstRun[0].runId as string),
      parentSpanId: null,
      name: 'orchestrator.run',
      kind: 0,
      stepId: null,
      startedUtc: firstRun[0].startedUtc,
      endedUtc: firstRun[0].finishedUtc,
      statusCode: 1,
      statusMessage: null,
      attributes: { tenant: 'exp-a', dagId: 'alpha', runId: firstRun[0].runId, status: 'succeeded' },
    });
    expect(step).toMatchObject({
      name: 'orchestrator.step',
      spanId: '1'.repeat(16),
      parentSpanId: runSpanId(firstRun[0].runId as string),
      traceId: firstRun[0].traceId,
      startedUtc: attempt.startedUtc,
      endedUtc: attempt.finishedUtc,
      statusCode: 1,
      attributes: { tenant: 'exp-a', dagId: 'alpha', stepId: 'one', attempt: 1, plugin: 'noop', status: 'succeeded' },
    });
    expect(call).toMatchObject({ name: 'orchestrator.plugin', parentSpanId: step.spanId });
    expect(firstRun.filter((r) => r.type === 'event').map((r) => r.seq)).toEqual([1, 2, 3, 4]);
    expect(signed.manifest).toMatchObject({
      tenant: 'exp-a',
      counts: { run: 4, event: 16, step: 4, attempt: 4, log: 4, metric: 16, span: 12 },
      lines: 60,
    });
    expect(signed.manifest.chains).toHaveLength(4);
    const byId = new Map(runsA.map((r) => [r.runId, r]));
    for (const c of signed.manifest.chains)
      expect(c).toEqual({ runId: c.runId, events: 4, head: byId.get(c.runId)!.hash });
    expect(await verifyExport(dir)).toMatchObject({ ok: true, lines: 60 });
  });

  it('exports the same data byte-identically twice', async () => {
    const a = path.join(tmp, 'twice-1');
    const b = path.join(tmp, 'twice-2');
    await exportTo(a, 'exp-a');
    await exportTo(b, 'exp-a');
    for (const f of [NDJSON_FILE, MANIFEST_FILE, JWS_FILE]) {
      expect(fs.readFileSync(path.join(a, f)).equals(fs.readFileSync(path.join(b, f)))).toBe(true);
    }
  });

  it('names the first bad line when one byte changes anywhere in the NDJSON', async () => {
    const dir = path.join(tmp, 'tamper');
    await exportTo(dir, 'exp-a');
    const file = path.join(dir, NDJSON_FILE);
    const original = fs.readFileSync(file);
    const text = original.toString('utf8');
    const starts = [0];
    for (let i = 0; i < text.length - 1; i++) if (text[i] === '\n') starts.push(i + 1);
    for (const line of [1, 3, 17, 30, starts.length]) {
      // A byte inside a value: a digit of the line's lineHash neighbour field or a letter of a string.
      const offset = starts[line - 1] + 12;
      const copy = Buffer.from(original);
      copy[offset] = copy[offset] === 0x61 ? 0x62 : 0x61;
      fs.writeFileSync(file, copy);
      const r = await verifyExport(dir);
      expect(r.ok).toBe(false);
      expect(r.problem?.line).toBe(line);
    }
    fs.writeFileSync(file, original);
    expect((await verifyExport(dir)).ok).toBe(true);
  });

  it('catches an event edited with every line hash recomputed: its run hash chain breaks at that line', async () => {
    const dir = path.join(tmp, 'rehash');
    await exportTo(dir, 'exp-a');
    const file = path.join(dir, NDJSON_FILE);
    const src = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean);
    const target = src.findIndex((l) => l.includes('"eventType":"step.succeeded"'));
    let prev = '';
    const out = src.map((l, i) => {
      const { record } = splitLine(l);
      if (i === target) (record as Record<string, unknown>).data = { outputsHash: '0'.repeat(64) };
      const body = canonicalJson(record);
      prev = lineHash(prev, body);
      return formatLine(body, prev);
    });
    fs.writeFileSync(file, `${out.join('\n')}\n`);
    const r = await verifyExport(dir);
    expect(r.ok).toBe(false);
    expect(r.problem).toEqual({ line: target + 1, message: expect.stringMatching(/event hash does not match/) });
  });

  it('rejects a manifest signed by another key, and a manifest.json that differs from the signed one', async () => {
    const dir = path.join(tmp, 'forged');
    await exportTo(dir, 'exp-a');
    const other = await SigningKeys.open(path.join(tmp, 'other-keys'), { create: true });
    fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(other.active.publicJwk));
    expect((await verifyExport(dir)).problem?.message).toMatch(/signed by key \S+, which is not the pinned key/);
    const good = path.join(tmp, 'edited-manifest');
    const signed = await exportTo(good, 'exp-a');
    fs.writeFileSync(path.join(good, MANIFEST_FILE), JSON.stringify({ ...signed.manifest, tenant: 'exp-b' }));
    expect((await verifyExport(good)).problem?.message).toMatch(/differs from the signed manifest/);
  });

  it('limits the export to the range and DAG, and tenant B export holds none of tenant A records', async () => {
    const dir = path.join(tmp, 'range');
    const signed = await exportTo(dir, 'exp-a', { from: '2026-01-10T01:30:00Z', to: '2026-01-10T03:00:00Z' });
    expect(
      lines(dir)
        .filter((r) => r.type === 'run')
        .map((r) => r.dagId),
    ).toEqual(['alpha']);
    expect(signed.manifest.range).toEqual({
      from: '2026-01-10T01:30:00.000Z',
      to: '2026-01-10T03:00:00.000Z',
      dagId: null,
    });
    const dag = path.join(tmp, 'dag');
    await exportTo(dag, 'exp-a', { dagId: 'alpha' });
    expect(lines(dag).filter((r) => r.type === 'run')).toHaveLength(2);

    const b = path.join(tmp, 'tenant-b');
    await exportTo(b, 'exp-b');
    const text = fs.readFileSync(path.join(b, NDJSON_FILE), 'utf8');
    for (const r of runsA) expect(text).not.toContain(r.runId);
    expect(lines(b).filter((r) => r.type === 'run')).toHaveLength(1);
    expect(await verifyExport(b)).toMatchObject({ ok: true });
  });

  it('never writes secret values', async () => {
    const dir = path.join(tmp, 'secrets');
    await exportTo(dir, 'exp-a');
    const text = fs.readFileSync(path.join(dir, NDJSON_FILE), 'utf8');
    expect(text).not.toContain(SECRET);
    expect(text).toContain('"password":"[redacted]"');
  });

  it('orders runs started in the same millisecond by dag id, whatever their microseconds, and resumes each page after the last run of the one before', async () => {
    // 240 runs (more than two pages), two to a millisecond: the later microsecond has the smaller dag id.
    const db = t.db.system;
    await db.insertInto('tenant').values({ id: 'exp-ms', name: 'ms' }).execute();
    const base = Date.UTC(2026, 0, 11, 9);
    const ids: string[] = [];
    for (let i = 0; i < 240; i++) {
      const at = new Date(base + Math.floor(i / 2));
      const run = await insertRun(db, 'exp-ms', i % 2 === 0 ? 'zulu' : 'alpha', { startedAt: at, status: 'succeeded' });
      await appendEvents(db, run, [{ type: 'run.created', createdAt: at }]);
      await sql`update run set started_at = started_at + make_interval(secs => ${i % 2 === 0 ? 0.0001 : 0.0009})
                 where tenant_id = 'exp-ms' and run_id = ${run.runId}::uuid`.execute(db);
      ids.push(run.runId);
    }
    const dir = path.join(tmp, 'same-ms');
    await exportTo(dir, 'exp-ms');
    const runs = lines(dir).filter((r) => r.type === 'run');
    expect(runs).toHaveLength(240);
    expect(new Set(runs.map((r) => r.runId)).size).toBe(240);
    expect(runs.slice(0, 4).map((r) => [r.startedUtc, r.dagId])).toEqual([
      ['2026-01-11T09:00:00.000Z', 'alpha'],
      ['2026-01-11T09:00:00.000Z', 'zulu'],
      ['2026-01-11T09:00:00.001Z', 'alpha'],
      ['2026-01-11T09:00:00.001Z', 'zulu'],
    ]);
    expect(await verifyExport(dir)).toMatchObject({ ok: true });
    // A range bound at a millisecond takes the runs started within it, whatever their microseconds.
    const part = path.join(tmp, 'same-ms-range');
    await exportTo(part, 'exp-ms', { from: '2026-01-11T09:00:00.010Z', to: '2026-01-11T09:00:00.012Z' });
    expect(
      lines(part)
        .filter((r) => r.type === 'run')
        .map((r) => r.dagId),
    ).toEqual(['alpha', 'zulu', 'alpha', 'zulu']);
  });

  it('answers a bad range with 400 INVALID_RANGE', () => {
    const bad = [
      { from: '2026-02-01T00:00:00Z', to: '2026-01-01T00:00:00Z' },
      { from: 'yesterday' },
      { to: '2026-13-45T00:00:00Z' },
      { from: '2026-01-01T00:00:00' },
    ];
    for (const req of bad) {
      let err: unknown;
      try {
        parseRange(req);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(DomainError);
      expect((err as DomainError).status).toBe(400);
      expect((err as DomainError).code).toBe('INVALID_RANGE');
    }
  });
});
