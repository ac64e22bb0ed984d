import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { splitLine } from '../../src/modules/export/export-format';
import { verifyExportFile } from '../../src/modules/export/export-verify';
import {
  baseBackup,
  dirBytes,
  drillDir,
  dumpLogical,
  restoreLogical,
  ownDir,
  Pg15,
  requirePostgres15,
  restoreFromArchive,
  switchAndArchive,
} from './backup';
import { Cluster, sleep, type OrdoProcess } from './cluster';
import { checkRuns, checkTimers, drain } from './invariants';
import { Api, setupTenants, Submitter, type Kind, type Submitted, type Tenant } from './workload';

/**
 * The backup and restore drill (docs/backup.md): an Ordo on a PostgreSQL 15 primary that archives
 * its WAL, a base backup taken during a burst of runs, the burst going on after it, then a cut — what
 * the primary has committed recorded, a restore point, its WAL segment archived — and the machine
 * lost (every Ordo process and the postmaster SIGKILLed). A fresh server is restored from the base
 * backup and the archive to the restore point, Ordo started on it with the keys from their own
 * backup, and the restored instance must hold every committed run as it was, orphan and retry the
 * steps that were in flight, finish every run, and export the runs that had finished before the cut
 * exactly as the original did, signed by the same key.
 */

/** The short form (CI) runs the point-in-time drill; the full form adds the pg_dump variant. */
const FULL = process.env.CHAOS_FORM !== 'short';
const RATE = Number(process.env.DRILL_RATE ?? 15);
const LEASE_MS = 3_000;
const REAPER_MS = 1_000;
/** Slow runs (a 3 s step) make sure steps are in flight at the cut; retry runs end failed by design. */
const KINDS: Kind[] = ['chain', 'diamond', 'slow', 'chain', 'retry', 'diamond'];
/** The burst before the base backup starts, and after it ends, before the cut. */
const BEFORE_BACKUP_MS = 3_000;
const AFTER_BACKUP_MS = 4_000;
const RESTORE_POINT = 'ordo-drill-cut';
const TERMINAL = ['succeeded', 'failed', 'cancelled'];

const SECRET_NAME = 'DRILL_SECRET';
const SECRET_DAG = {
  id: 'drill-secret',
  steps: [{ id: 'use', plugin: 'noop', with: { output: { value: `\${{ secrets.${SECRET_NAME} }}` } } }],
};

interface Snapshot {
  runs: Map<string, { tenant: string; token: string; status: string }>;
  /** Per run, its events in seq order as "seq type hash". */
  events: Map<string, string[]>;
  /** Per "run/step", status and outputs of the steps that had ended. */
  steps: Map<string, string>;
}

/** What the database has committed, in one repeatable-read snapshot. */
async function record(url: string): Promise<Snapshot> {
  const c = new pg.Client({ connectionString: url, application_name: 'drill:record' });
  await c.connect();
  try {
    await c.query('begin isolation level repeatable read read only');
    const runs = await c.query<{ run_id: string; tenant_id: string; run_token: string; status: string }>(
      'select run_id, tenant_id, run_token, status from run',
    );
    const events = await c.query<{ run_id: string; seq: number; type: string; hash: string }>(
      'select run_id, seq, type, hash from run_event order by run_id, seq',
    );
    const steps = await c.query<{ run_id: string; step_id: string; status: string; outputs: unknown }>(
      `select run_id, step_id, status, outputs from step where status in ('succeeded', 'failed', 'skipped', 'cancelled')`,
    );
    await c.query('commit');
    const snap: Snapshot = { runs: new Map(), events: new Map(), steps: new Map() };
    for (const r of runs.rows)
      snap.runs.set(r.run_id, { tenant: r.tenant_id, token: r.run_token ?? '', status: r.status });
    for (const e of events.rows) {
      const list = snap.events.get(e.run_id) ?? [];
      list.push(`${e.seq} ${e.type} ${e.hash}`);
      snap.events.set(e.run_id, list);
    }
    for (const s of steps.rows) snap.steps.set(`${s.run_id}/${s.step_id}`, `${s.status} ${JSON.stringify(s.outputs)}`);
    return snap;
  } finally {
    await c.end();
  }
}

/**
 * The committed state `want` is in `have`: every run, with its events as a prefix of the restored
 * ones (identical when `exact`), every ended step with its status and outputs. Returns the problems.
 */
function contains(have: Snapshot, want: Snapshot, { exactForEnded }: { exactForEnded: boolean }): string[] {
  const problems: string[] = [];
  for (const [runId, r] of want.runs) {
    const got = have.runs.get(runId);
    if (!got) {
      problems.push(`run ${r.token} (${runId}) missing`);
      continue;
    }
    if (TERMINAL.includes(r.status) && got.status !== r.status)
      problems.push(`run ${r.token} was ${r.status}, restored ${got.status}`);
    const a = want.events.get(runId) ?? [];
    const b = have.events.get(runId) ?? [];
    const exact = exactForEnded && TERMINAL.includes(r.status);
    if (b.length < a.length || a.some((e, i) => e !== b[i]) || (exact && b.length !== a.length))
      problems.push(
        `run ${r.token}: events ${a.length} → ${b.length}, first difference at ${a.findIndex((e, i) => e !== b[i])}`,
      );
  }
  for (const [key, s] of want.steps)
    if (have.steps.get(key) !== s) problems.push(`step ${key}: ${s} → ${have.steps.get(key)}`);
  return problems;
}

/** A tenant's whole export (HTTP form) into `file`. */
async function exportTenant(p: OrdoProcess, t: Tenant, file: string): Promise<void> {
  const r = await fetch(`${p.url}/api/v1/export`, {
    headers: { authorization: `Bearer ${t.token}`, 'x-tenant-id': t.id },
    signal: AbortSignal.timeout(120_000),
  });
  const body = await r.text();
  if (r.status !== 200) throw new Error(`export of ${t.id}: ${r.status} ${body.slice(0, 300)}`);
  fs.writeFileSync(file, body);
}

/** The records of an export (canonical JSON, without line hashes), grouped by run; the manifest line's public key. */
function exportRecords(file: string): { runs: Map<string, string[]>; publicJwk: unknown } {
  const lines = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean);
  const last = JSON.parse(lines.pop()!) as { type: string; publicJwk: unknown };
  if (last.type !== 'manifest') throw new Error(`${file}: the last line is not the manifest`);
  const runs = new Map<string, string[]>();
  let current: string[] = [];
  for (const line of lines) {
    const { record, canonical } = splitLine(line);
    if (record.type === 'run') {
      current = [];
      runs.set(String(record.runId), current);
    }
    current.push(canonical);
  }
  return { runs, publicJwk: last.publicJwk };
}

function ms(t0: number): number {
  return Date.now() - t0;
}

let primary: Pg15 | undefined;
let restored: Pg15 | undefined;
let original: Cluster | undefined;
let revived: Cluster | undefined;
let fromDump: Pg15 | undefined;
let third: Cluster | undefined;
/** What the pg_dump variant takes over from the drill. */
let drilled: { dir: string; tenants: Tenant[]; keysBackup: string; pinnedKey: string; exports: string[] } | undefined;
const figures: [string, string][] = [];

afterAll(() => {
  original?.killAll();
  revived?.killAll();
  third?.killAll();
  for (const s of [fromDump, restored, primary]) {
    try {
      if (s && fs.existsSync(path.join(s.dataDir, 'postmaster.pid'))) s.stop('immediate');
    } catch {
      // Already gone.
    }
  }
  original?.destroy();
  revived?.destroy();
  third?.destroy();
  if (figures.length > 0)
    process.stdout.write(
      `\nbackup drill\n| measure | value |\n|---|---|\n${figures.map(([k, v]) => `| ${k} | ${v} |`).join('\n')}\n\n`,
    );
});

const NAME = 'backup and restore drill';
/** CHAOS_CELLS (substrings of names, as for the chaos cells) selects the drill by e.g. `backup`. */
const CELLS = (process.env.CHAOS_CELLS ?? '').split(',').filter(Boolean);
const selected = CELLS.length === 0 || CELLS.some((c) => NAME.includes(c));

describe(NAME, () => {
  (selected ? it : it.skip)(
    'restores a base backup taken during a burst and the WAL archive: every committed run is there, in-flight steps are retried, exports equal the original',
    async () => {
      requirePostgres15();
      const dir = drillDir('ordo-drill-');
      const archiveDir = path.join(dir, 'wal-archive');
      const backupDir = path.join(dir, 'base-backup');
      const keysBackup = path.join(dir, 'keys-backup');
      ownDir(archiveDir);

      // The original: PostgreSQL archiving its WAL, Ordo's roles as separate processes.
      primary = new Pg15(dir, 'primary');
      await primary.init({ archiveDir });
      original = new Cluster(primary, { leaseMs: LEASE_MS, reaperMs: REAPER_MS });
      const start = async (c: Cluster, role: 'api' | 'scheduler' | 'worker') => {
        const p = await c.spawn(role);
        await c.ready(p);
        return p;
      };
      const t00 = Date.now();
      await start(original, 'api');
      await Promise.all([start(original, 'scheduler'), start(original, 'worker'), start(original, 'worker')]);
      const firstStartMs = ms(t00);
      const api = new Api(original);
      const tenants = await setupTenants(api, original.credentials().platformToken, 2, 'drill-t');
      const [t1] = tenants;
      const deadline = Date.now() + 60_000;
      const put = await api.persist(
        'PUT',
        `/api/v1/secrets/${SECRET_NAME}`,
        { token: t1.token, tenant: t1.id, body: { value: 'sealed-before-the-backup' } },
        deadline,
      );
      expect([200, 201]).toContain(put.status);
      const pub = await api.persist(
        'POST',
        '/api/v1/dags',
        { token: t1.token, tenant: t1.id, body: SECRET_DAG },
        deadline,
      );
      expect([200, 201]).toContain(pub.status);
      // The keys are backed up on their own, once (and after every rotation): they are not in the database.
      fs.cpSync(path.join(original.home, 'keys'), keysBackup, { recursive: true });

      // The burst; the base backup in the middle of it.
      const burst = new Submitter(api, tenants, 'drill', RATE, KINDS);
      burst.start();
      await sleep(BEFORE_BACKUP_MS);
      const atBackup = burst.runs.length;
      const t0 = Date.now();
      await baseBackup(primary, backupDir);
      const backupMs = ms(t0);
      const duringBackup = burst.runs.length - atBackup;
      await sleep(AFTER_BACKUP_MS);
      await burst.stop();

      // The cut: what is committed, a restore point after it, its WAL segment in the archive.
      const cut = await record(primary.ownerUrl);
      await primary.query('ordo', `select pg_create_restore_point('${RESTORE_POINT}')`);
      const lastSegment = await switchAndArchive(primary, archiveDir);
      const inFlightAtCut = [...cut.runs.values()].filter((r) => !TERMINAL.includes(r.status)).length;
      const originalExports = await Promise.all(
        tenants.map(async (t) => {
          const file = path.join(dir, `original-${t.id}.ndjson`);
          await exportTenant(original!.live('api')[0], t, file);
          return file;
        }),
      );
      const pinnedKey = path.join(dir, 'instance.jwk.json');
      fs.writeFileSync(pinnedKey, JSON.stringify(exportRecords(originalExports[0]).publicJwk));

      // The machine is lost.
      original.killAll();
      primary.kill();
      await Promise.all(original.procs.map((p) => p.exited));

      // Restore into a fresh data directory, to the restore point.
      restored = new Pg15(dir, 'restored');
      const t1Restore = Date.now();
      await restoreFromArchive(backupDir, archiveDir, { name: RESTORE_POINT }, restored);
      const restoreMs = ms(t1Restore);
      const walSegments = fs.readdirSync(archiveDir).filter((f) => /^[0-9A-F]{24}$/.test(f)).length;

      // Before Ordo starts: everything committed at the cut is there as it was.
      const atRestore = await record(restored.ownerUrl);
      expect(contains(atRestore, cut, { exactForEnded: true })).toEqual([]);
      const owner = new pg.Client({ connectionString: restored.ownerUrl, application_name: 'drill:owner' });
      owner.on('error', () => undefined);
      await owner.connect();
      const heldAtCut = (
        await owner.query<{ run_id: string; step_id: string; attempt: number }>(
          `select run_id, step_id, attempt from attempt where status = 'running'`,
        )
      ).rows;

      // Ordo on the restored server, with the keys from their backup in a fresh home.
      revived = new Cluster(restored, { leaseMs: LEASE_MS, reaperMs: REAPER_MS });
      fs.cpSync(keysBackup, path.join(revived.home, 'keys'), { recursive: true });
      const t2 = Date.now();
      await start(revived, 'api');
      await Promise.all([start(revived, 'scheduler'), start(revived, 'worker'), start(revived, 'worker')]);
      const readyMs = ms(t2);
      const api2 = new Api(revived);

      // New work on the restored instance: the old tokens still authenticate, the old secret still opens.
      const after = new Submitter(api2, tenants, 'drill-after', RATE, ['chain']);
      await after.submitCount('chain', 10, 5);
      const secretRun = await api2.persist(
        'POST',
        '/api/v1/runs',
        { token: t1.token, tenant: t1.id, body: { dagId: SECRET_DAG.id, inputs: {}, runToken: 'drill:secret' } },
        Date.now() + 60_000,
      );
      expect(secretRun.status).toBe(201);
      const secretRunId = secretRun.body.runId as string;
      const db = () => Promise.resolve(owner);
      let firstRunMs = 0;
      for (;;) {
        const [r] = (
          await owner.query<{ n: number }>(
            `select count(*)::int as n from run where run_id = any($1::uuid[]) and status = 'succeeded'`,
            [after.runs.map((s) => s.runId)],
          )
        ).rows;
        if (r.n > 0) {
          firstRunMs = ms(t2);
          break;
        }
        if (ms(t2) > 120_000) throw new Error('no new run finished on the restored instance in 120 s');
        await sleep(100);
      }

      // Every run committed at the cut, and the new ones, finish.
      const committed: Submitted[] = burst.runs.filter((s) => s.runId && atRestore.runs.has(s.runId));
      const secretSubmitted: Submitted = {
        token: 'drill:secret',
        tenant: t1.id,
        kind: 'chain',
        k: '',
        submittedAt: 0,
        runId: secretRunId,
      };
      const drained = await drain(db, [...committed, ...after.runs, secretSubmitted], 180_000, 60_000);
      const drainMs = ms(t2);
      const violations: string[] = [];
      if (!drained) violations.push('every run terminal and the queue empty after the restore');
      // Timers the lost processes held stay locked until the job runners' sweep releases them
      // (45 s after they were taken); then none is late.
      let timers = await checkTimers(owner);
      for (let i = 0; i < 60 && timers.length > 0; i++) {
        await sleep(1_000);
        timers = await checkTimers(owner);
      }
      violations.push(...timers);
      const checked = await checkRuns(
        owner,
        [...committed, ...after.runs],
        new Date(Date.now() + 3_600_000).toISOString(),
      );
      violations.push(...checked.violations);
      // Every acknowledged run was committed before the cut (the burst stopped before it).
      const missing = burst.runs.filter((s) => s.runId && !atRestore.runs.has(s.runId)).map((s) => s.token);
      if (missing.length > 0)
        violations.push(`acknowledged runs missing after the restore: ${missing.slice(0, 3).join(', ')}`);

      // The steps in flight at the cut were orphaned (lease expiry) and run again.
      const orphaned = (
        await owner.query<{ run_id: string; step_id: string; attempt: number; status: string; code: string | null }>(
          `select a.run_id, a.step_id, a.attempt, a.status, a.error->>'code' as code
           from attempt a join unnest($1::uuid[], $2::text[], $3::int[]) as h(run_id, step_id, attempt)
             on (a.run_id, a.step_id, a.attempt) = (h.run_id, h.step_id, h.attempt)`,
          [heldAtCut.map((h) => h.run_id), heldAtCut.map((h) => h.step_id), heldAtCut.map((h) => h.attempt)],
        )
      ).rows;
      const notOrphaned = orphaned
        .filter((a) => a.code !== 'LEASE_EXPIRED')
        .map((a) => `${a.run_id}/${a.step_id}#${a.attempt} ${a.status} ${a.code}`);
      if (heldAtCut.length === 0) violations.push('steps in flight at the cut (none were: the drill proves nothing)');
      if (notOrphaned.length > 0)
        violations.push(`steps in flight at the cut orphaned (LEASE_EXPIRED): ${notOrphaned.slice(0, 3).join('; ')}`);
      const retried = (
        await owner.query<{ n: number }>(
          `select count(*)::int as n from attempt a join unnest($1::uuid[], $2::text[], $3::int[]) as h(run_id, step_id, attempt)
            on (a.run_id, a.step_id) = (h.run_id, h.step_id) and a.attempt > h.attempt`,
          [heldAtCut.map((h) => h.run_id), heldAtCut.map((h) => h.step_id), heldAtCut.map((h) => h.attempt)],
        )
      ).rows[0].n;

      // The secret sealed before the backup opened on the restored instance.
      const secret = (
        await owner.query<{ status: string; error: unknown }>(`select status, error from step where run_id = $1`, [
          secretRunId,
        ])
      ).rows;
      if (secret.length !== 1 || secret[0].status !== 'succeeded')
        violations.push(`the secret sealed before the backup opens after it: ${JSON.stringify(secret)}`);

      // What was committed at the cut is still there, unchanged for the runs that had ended.
      const end = await record(restored.ownerUrl);
      violations.push(...contains(end, cut, { exactForEnded: true }).map((p) => `after the restore: ${p}`));

      // The restored instance's exports verify against the key pinned from the original, and the
      // runs that had finished before the cut export exactly as they did on the original.
      const finishedAtCut = new Set([...cut.runs].filter(([, r]) => TERMINAL.includes(r.status)).map(([id]) => id));
      let compared = 0;
      const restoredExports: string[] = [];
      for (const [i, t] of tenants.entries()) {
        const file = path.join(dir, `restored-${t.id}.ndjson`);
        await exportTenant(revived.live('api')[0], t, file);
        restoredExports.push(file);
        for (const f of [originalExports[i], file]) {
          const v = await verifyExportFile(f, { keyFile: pinnedKey });
          if (!v.ok) violations.push(`${path.basename(f)} verifies: ${JSON.stringify(v.problem)}`);
        }
        const a = exportRecords(originalExports[i]).runs;
        const b = exportRecords(file).runs;
        for (const runId of finishedAtCut) {
          if (cut.runs.get(runId)!.tenant !== t.id) continue;
          const x = a.get(runId);
          const y = b.get(runId);
          if (!x || !y || x.join('\n') !== y.join('\n')) {
            violations.push(`run ${runId} exports alike before and after: ${x?.length} vs ${y?.length} records`);
            break;
          }
          compared++;
        }
      }
      await owner.end();
      drilled = { dir, tenants, keysBackup, pinnedKey, exports: restoredExports };

      figures.push(
        [
          'runs submitted / committed at the cut (in flight)',
          `${burst.runs.length} / ${cut.runs.size} (${inFlightAtCut})`,
        ],
        ['runs submitted while pg_basebackup ran', String(duringBackup)],
        [
          'base backup (pg_basebackup -X stream + pg_verifybackup)',
          `${(backupMs / 1000).toFixed(1)} s, ${(dirBytes(backupDir) / 1048576).toFixed(0)} MiB`,
        ],
        ['WAL segments archived (last)', `${walSegments} (${lastSegment})`],
        ['restore (copy, replay to the restore point, promote)', `${(restoreMs / 1000).toFixed(1)} s`],
        [
          'Ordo ready (4 processes): first start / on the restored server',
          `${(firstStartMs / 1000).toFixed(1)} s / ${(readyMs / 1000).toFixed(1)} s`,
        ],
        ['first new run finished, from Ordo start', `${(firstRunMs / 1000).toFixed(1)} s`],
        ['steps in flight at the cut: orphaned / retried', `${heldAtCut.length} / ${retried}`],
        ['every run finished, from Ordo start', `${(drainMs / 1000).toFixed(1)} s`],
        ['finished runs exported alike (original = restored)', `${compared} of ${finishedAtCut.size}`],
      );
      expect(violations).toEqual([]);
      expect(compared).toBe(finishedAtCut.size);
    },
    600_000,
  );

  (selected && FULL ? it : it.skip)(
    'restores a pg_dump of the restored instance, taken while Ordo runs, into a new server: the same runs, the same exports, and Ordo runs on it',
    async () => {
      if (!drilled) throw new Error('the drill before this one did not get as far as its exports');
      const { dir, tenants, keysBackup, pinnedKey, exports } = drilled;
      const dumped = await record(restored!.ownerUrl);
      const dumpDir = path.join(dir, 'dump');
      const t0 = Date.now();
      await dumpLogical(restored!, dumpDir);
      const dumpMs = ms(t0);
      const dumpBytes = fs.statSync(path.join(dumpDir, 'ordo.dump')).size;
      // The second machine is lost too.
      revived!.killAll();
      restored!.kill();

      fromDump = new Pg15(dir, 'from-dump');
      const t1 = Date.now();
      await restoreLogical(dumpDir, fromDump);
      const restoreMs = ms(t1);
      const loaded = await record(fromDump.ownerUrl);
      expect(contains(loaded, dumped, { exactForEnded: true })).toEqual([]);
      expect(loaded.runs.size).toBe(dumped.runs.size);

      // Ordo on it, one process with every role, the same keys.
      third = new Cluster(fromDump, { leaseMs: LEASE_MS, reaperMs: REAPER_MS });
      fs.cpSync(keysBackup, path.join(third.home, 'keys'), { recursive: true });
      const t2 = Date.now();
      const p = await third.spawn('api', { ORDO_ROLES: 'api,scheduler,worker' });
      await third.ready(p);
      const readyMs = ms(t2);
      const owner = new pg.Client({ connectionString: fromDump.ownerUrl, application_name: 'drill:owner' });
      owner.on('error', () => undefined);
      await owner.connect();
      try {
        const submitter = new Submitter(new Api(third), tenants, 'drill-dump', 1, ['chain']);
        await submitter.submitCount('chain', 6, 3);
        const drained = await drain(() => Promise.resolve(owner), submitter.runs, 120_000, 60_000);
        const runMs = ms(t2);
        const violations: string[] = [];
        if (!drained) violations.push('the new runs finish on the server restored from the dump');
        violations.push(
          ...(await checkRuns(owner, submitter.runs, new Date(Date.now() + 3_600_000).toISOString())).violations,
        );
        // Every run the restored instance exported exports alike from the dump's server, under the same key.
        let compared = 0;
        for (const [i, t] of tenants.entries()) {
          const file = path.join(dir, `from-dump-${t.id}.ndjson`);
          await exportTenant(p, t, file);
          const v = await verifyExportFile(file, { keyFile: pinnedKey });
          if (!v.ok) violations.push(`${path.basename(file)} verifies: ${JSON.stringify(v.problem)}`);
          const a = exportRecords(exports[i]).runs;
          const b = exportRecords(file).runs;
          for (const [runId, records] of a) {
            if (b.get(runId)?.join('\n') !== records.join('\n')) {
              violations.push(`run ${runId} exports alike from the dump`);
              break;
            }
            compared++;
          }
        }
        figures.push(
          [
            'pg_dumpall --roles-only + pg_dump -Fc (Ordo running)',
            `${(dumpMs / 1000).toFixed(1)} s, ${(dumpBytes / 1048576).toFixed(1)} MiB`,
          ],
          ['restore of the dump (initdb, roles, pg_restore)', `${(restoreMs / 1000).toFixed(1)} s`],
          [
            'Ordo ready on it (1 process, every role) / 6 new runs finished',
            `${(readyMs / 1000).toFixed(1)} s / ${(runMs / 1000).toFixed(1)} s`,
          ],
          ['runs exported alike (restored = from the dump)', String(compared)],
        );
        expect(violations).toEqual([]);
        expect(compared).toBe(dumped.runs.size);
      } finally {
        await owner.end();
      }
    },
    300_000,
  );
});
