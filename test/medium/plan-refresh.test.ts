import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import { Database } from '../../src/core/database/database';
import { PlanRefresh, preparedKysely } from '../../src/core/database/prepared';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { publishDagVersion } from '../support/publish-dag';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * Cached generic plans follow the tables as they grow: a plan made while `run` was empty is made
 * again once the table's committed rows have doubled, so lookups by primary key go through the
 * primary key.
 */
describe('prepared handles: plans re-made as the hot tables grow', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let pool: pg.Pool;
  let refresh: PlanRefresh;
  let flushStats: () => Promise<void>;

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    await owner.query(`insert into tenant (id, name) values ('ta', 'A')`);
    // What the check reads (live tuples) lags a committing session by up to a second; the tests
    // have the owner's session publish its counts at once.
    flushStats = async () => {
      await owner.query('select pg_stat_force_next_flush()');
    };
    // One connection, so that every statement below runs where the first plan was cached.
    pool = new pg.Pool({ connectionString: t.systemUrl, max: 1 });
    refresh = new PlanRefresh(pool);
  });
  afterAll(async () => {
    refresh.stop();
    await pool.end();
    await owner.end();
    await t.drop();
  });

  /** What the planner believes `table` holds (negative: never analyzed). */
  const reltuples = async (table: string) =>
    (await owner.query<{ n: number }>(`select reltuples::float8 as n from pg_class where relname = $1`, [table]))
      .rows[0].n;
  /** How far the first check of a new PlanRefresh, in a busy process, moves its generation on. */
  const firstCheckGenerations = async () => {
    const fresh = new PlanRefresh(pool);
    try {
      const before = fresh.current();
      for (let i = 0; i < 5; i++) fresh.current();
      await fresh.check();
      return fresh.current() - before;
    } finally {
      fresh.stop();
    }
  };

  it('re-plans after a watched table doubles, and not before', async () => {
    const db = preparedKysely(pool, {
      named: true,
      prefix: 'ordo_t_',
      refresh,
      // As the engine functions plan: generic plans, index nested loops.
      init: 'set plan_cache_mode = force_generic_plan; set enable_seqscan = off; set enable_hashjoin = off; set enable_mergejoin = off',
    });
    const lookup = sql<{ event_seq: number }>`select x.event_seq
      from unnest(${['ta']}::text[], ${['11111111-1111-4111-8111-111111111111']}::uuid[]) as e(t, id)
      join run x on x.tenant_id = e.t and x.run_id = e.id`;
    // As the claim reaches the runs of its items: only active ones (the predicate of the partial
    // index run_dag_active_idx, which leads with tenant_id).
    const activeLookup = sql<{ event_seq: number }>`select x.event_seq
      from unnest(${['ta']}::text[], ${['11111111-1111-4111-8111-111111111111']}::uuid[]) as e(t, id)
      join run x on x.tenant_id = e.t and x.run_id = e.id
      where x.status in ('queued', 'running')`;
    // The cached plan of a prepared statement, as the connection would run it now.
    const planOf = (statement: typeof lookup) =>
      db.transaction().execute(async (trx) => {
        const name = `ordo_t_${createHash('sha1').update(statement.compile(db).sql).digest('hex').slice(0, 20)}`;
        await statement.execute(trx);
        const r = await sql
          .raw<{ 'QUERY PLAN': string }>(`explain execute ${name}('{ta}', '{11111111-1111-4111-8111-111111111111}')`)
          .execute(trx);
        return r.rows.map((row) => row['QUERY PLAN']).join('\n');
      });
    const cachedPlan = () => planOf(lookup);

    // A busy process: enough connections taken since the last check for the next one to run.
    const busyCheck = async () => {
      for (let i = 0; i < 5; i++) refresh.current();
      await refresh.check();
    };
    const first = await cachedPlan();
    await planOf(activeLookup);
    await busyCheck(); // the sizes of the empty tables: the baseline
    const before = refresh.current();

    // Not doubled: no new generation, the connection keeps its plans.
    await owner.query(`set app.tenant_id = 'ta'`);
    const insertRuns = (n: number) =>
      owner.query(
        `insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, trace_id,
           requested_by, steps_total, steps_remaining)
         select 'ta', gen_random_uuid(), 'd', 1, 'h', 'tok' || i || '-' || $1, '{}', repeat('a', 64), repeat('b', 32), 'me', 1, 1
         from generate_series(1, $1::int) i`,
        [n],
      );
    await insertRuns(10);
    await flushStats();
    await busyCheck();
    expect(refresh.current()).toBe(before);

    // Thousands of runs: the table is many times its size, the next use re-plans.
    await insertRuns(5_000);
    await flushStats();
    await busyCheck();
    expect(refresh.current()).toBe(before + 1);
    const after = await cachedPlan();
    expect(after).toMatch(/Index Scan using run_pk on run x/);
    // Re-planned with the statistics of the grown table: one tenant holds all its active runs, so
    // the partial index that leads with tenant_id is no shortcut.
    expect(await planOf(activeLookup)).toMatch(/Index Scan using run_pk on run x/);
    const { rows: analyzed } = await owner.query<{ n: number }>(
      `select count(*)::int as n from pg_stats where schemaname = 'public' and tablename = 'run' and attname = 'tenant_id'`,
    );
    expect(analyzed[0].n).toBe(1);
    // The plan the re-plan exists for: made on the empty table, it reaches runs through an index
    // that leads with tenant_id only (every index costs the same on an empty table).
    expect(first).not.toMatch(/using run_pk/);

    // An idle process (a connection taken now and then) issues no query.
    await busyCheck();
    await cachedPlan();
    const spy = jest.spyOn(pool, 'query');
    await refresh.check();
    expect(spy).not.toHaveBeenCalled();
    spy.mockRestore();
  });

  it('has the session that creates a batch of runs publish its row counts as it goes idle, for the next check', async () => {
    await publishDagVersion(t.db, 'ta', { id: 'batch', steps: [{ id: 'x', plugin: 'noop' }] });
    // Two creations in a row on a new session, whose first transaction published its counts at
    // once: without the batch's request, both creations' rows would reach the statistics ten
    // seconds later.
    const { db, create } = creator(t);
    const live = async () =>
      (await owner.query<{ n: number }>(`select pg_stat_get_live_tuples('run'::regclass)::int as n`)).rows[0].n;
    try {
      const before = await live();
      await create(1, 'first-');
      await create(60, 'batch-');
      expect(await live()).toBe(before + 61);
    } finally {
      await db.close();
    }
  });

  it('analyzes and re-plans at its first check a watched table past the floor that was never analyzed', async () => {
    await owner.query(`set app.tenant_id = 'ta'`);
    await owner.query(
      `insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, claimed_at)
       select 'ta', gen_random_uuid(), 's' || i, 1, 1, 'w', now(), repeat('0', 55), now() from generate_series(1, 2000) i`,
    );
    await flushStats();
    expect(await reltuples('attempt')).toBeLessThan(0);
    expect(await firstCheckGenerations()).toBe(1);
    expect(await reltuples('attempt')).toBeGreaterThan(1000);
  });

  it("watches the external workers' tasks too, and a table of a few hundred rows planned as empty", async () => {
    await owner.query(`set app.tenant_id = 'ta'`);
    // 150 pending tasks of the runs above: past twice the floor, far from the thousands a plan made
    // on the empty table needs before it costs a batch more than its own rows.
    await owner.query(
      `insert into worker_task (tenant_id, task_id, run_id, step_id, attempt, epoch, dag_id, dag_version, pool, task_type,
         traceparent, deadline)
       select 'ta', gen_random_uuid(), r.run_id, 's', 1, 1, 'd', 1, 'default', 'noop', repeat('0', 55), now() + interval '1 hour'
       from (select run_id from run where tenant_id = 'ta' limit 150) r`,
    );
    await flushStats();
    expect(await reltuples('worker_task')).toBeLessThan(0);
    expect(await firstCheckGenerations()).toBe(1);
    expect(await reltuples('worker_task')).toBe(150);
  });

  it('does not analyze a table in the middle of a large insert: it waits for the rows to be committed', async () => {
    expect(await reltuples('queue_item')).toBeLessThan(0);
    const writer = new pg.Client({ connectionString: t.ownerUrl });
    await writer.connect();
    const fresh = new PlanRefresh(pool);
    const busyCheck = async () => {
      for (let i = 0; i < 5; i++) fresh.current();
      await fresh.check();
    };
    try {
      const before = fresh.current();
      // 5,000 ready steps queued in one transaction, still under way: the file has grown, but
      // ANALYZE would count none of these rows and leave the queue planned as an empty table.
      await writer.query('begin');
      await writer.query(`set local app.tenant_id = 'ta'`);
      await writer.query(
        `insert into queue_item (tenant_id, run_id, step_id)
         select 'ta', gen_random_uuid(), 's' from generate_series(1, 5000)`,
      );
      const { rows } = await owner.query<{ bytes: number }>(`select pg_relation_size('queue_item')::int as bytes`);
      expect(rows[0].bytes).toBeGreaterThan(256 * 1024);
      await busyCheck();
      expect(fresh.current()).toBe(before);
      expect(await reltuples('queue_item')).toBeLessThan(0);

      // Committed: the next check analyzes the queue with its rows and re-plans.
      await writer.query('commit');
      await writer.query('select pg_stat_force_next_flush()');
      await busyCheck();
      expect(fresh.current()).toBe(before + 1);
      expect(await reltuples('queue_item')).toBeGreaterThan(4000);
    } finally {
      fresh.stop();
      await writer.query('rollback').catch(() => undefined);
      await writer.end();
    }
  });

  it('re-analyzes a backlog that arrives after autovacuum analyzed the queue empty, however large it was before', async () => {
    await owner.query(`set app.tenant_id = 'ta'`);
    const queue = async (n: number) => {
      await owner.query(
        `insert into queue_item (tenant_id, run_id, step_id) select 'ta', gen_random_uuid(), 's' from generate_series(1, $1::int)`,
        [n],
      );
      await flushStats();
    };
    const fresh = new PlanRefresh(pool);
    const busyCheck = async () => {
      for (let i = 0; i < 5; i++) fresh.current();
      await fresh.check();
    };
    try {
      await owner.query(`delete from queue_item`);
      await queue(5_000);
      await owner.query('analyze queue_item');
      const before = fresh.current();
      await busyCheck();
      expect(fresh.current()).toBe(before);

      // The queue drains, autovacuum analyzes it empty (PostgreSQL re-plans with that), and the
      // same backlog comes back: its statistics say empty, so it is analyzed again.
      await owner.query(`delete from queue_item`);
      await flushStats();
      await owner.query('analyze queue_item');
      expect(await reltuples('queue_item')).toBe(0);
      await queue(5_000);
      await busyCheck();
      expect(fresh.current()).toBe(before + 1);
      expect(await reltuples('queue_item')).toBeGreaterThan(4000);
    } finally {
      fresh.stop();
    }
  });
});

describe('prepared handles: a batch of runs compared at once', () => {
  let t: TestDatabase;
  let owner: pg.Client;

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    await owner.query(`insert into tenant (id, name) values ('ta', 'A')`);
    await publishDagVersion(t.db, 'ta', { id: 'batch', steps: [{ id: 'x', plugin: 'noop' }] });
  });
  afterAll(async () => {
    await owner.end();
    await t.drop();
  });

  it('compares the tables as soon as a creation of a batch of runs commits, in the creating process', async () => {
    const reltuples = async () =>
      (await owner.query<{ n: number }>(`select reltuples::float8 as n from pg_class where relname = 'run'`)).rows[0].n;
    // Runs planned as none: the batch below is past twice the floor.
    await owner.query('analyze run');
    expect(await reltuples()).toBe(0);
    const { db, create } = creator(t);
    const spy = jest.spyOn(db.systemPool, 'query');
    const comparisons = () => spy.mock.calls.filter((c) => String(c[0]).includes('pg_stat_get_live_tuples')).length;
    const created = async (n: number, prefix: string) => {
      await create(n, prefix);
      await db.planRefresh.settled();
    };
    try {
      // A run on its own asks for nothing.
      await created(1, 'alone-');
      expect(comparisons()).toBe(0);
      // 120 runs: compared and analyzed once committed, before the interval's check (which this
      // process, having taken few connections, would skip anyway).
      await created(120, 'many-');
      expect(comparisons()).toBe(1);
      expect(await reltuples()).toBe(121);
      // A batch that cannot have doubled the table as now planned waits for the interval: a steady
      // stream of creations adds no comparisons. One as large as the table is compared again.
      await created(60, 'more-');
      expect(comparisons()).toBe(1);
      await created(130, 'doubling-');
      expect(comparisons()).toBe(2);
      expect(await reltuples()).toBe(311);
    } finally {
      spy.mockRestore();
      await db.close();
    }
  });
});

/** A process's Database and RunsService on `t`, and `create`: `n` runs of DAG `batch` for tenant ta in one call. */
function creator(t: TestDatabase) {
  const db = new Database({ app: t.appUrl, system: t.systemUrl }, { poolSize: 2, applicationName: 'ordo:test' });
  const runs = new RunsService(db, new RunsRepository(), new DagsRepository());
  const create = (n: number, prefix: string) =>
    runs.createRuns(
      'ta',
      Array.from({ length: n }, (_, i) => ({
        dagId: 'batch',
        inputs: {},
        runToken: `${prefix}${i}`,
        requestedBy: 'me',
      })),
    );
  return { db, create };
}
