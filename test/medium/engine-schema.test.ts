import { sql } from 'kysely';
import pg from 'pg';
import {
  ATTEMPT_STATES,
  canTransition,
  RUN_STATES,
  STEP_STATES,
  transitionRows,
} from '../../src/modules/runs/state-machine';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('run schema: transitions and the append-only event log', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    await owner.query(`insert into tenant (id, name) values ('ta', 'A'), ('tb', 'B')`);
    await owner.query(`insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, trace_id,
        requested_by, steps_total, steps_remaining)
      values ('ta', '11111111-1111-4111-8111-111111111111', 'd', 1, 'h', 'tok', '{}', repeat('a', 64), repeat('b', 32), 'me', 1, 1)`);
    await owner.query(`insert into step (tenant_id, run_id, step_id, status, plugin, config, spec, depends_on, topo_index, pending_deps)
      values ('ta', '11111111-1111-4111-8111-111111111111', 's', 'pending', 'noop', '{}', '{}', '{}', 0, 0)`);
    await owner.query(`insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
      values ('ta', '11111111-1111-4111-8111-111111111111', 1, now(), 'run.created', 'me', '{}', '', repeat('c', 64))`);
  });
  afterAll(async () => {
    await owner.end();
    await t.drop();
  });

  it('holds the same transition table as the code', async () => {
    const { rows } = await owner.query<{ entity: string; from_state: string; to_state: string }>(
      'select entity, from_state, to_state from state_transition order by 1, 2, 3',
    );
    const db = rows.map((r) => `${r.entity}:${r.from_state}->${r.to_state}`).sort();
    const code = transitionRows()
      .map((r) => `${r.entity}:${r.from}->${r.to}`)
      .sort();
    expect(db).toEqual(code);
  });

  it("lets the tables' triggers apply exactly the code's transitions, for every pair of states", async () => {
    await owner.query(`insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, claimed_at)
      values ('ta', '11111111-1111-4111-8111-111111111111', 's', 1, 1, 'w', now(), 'tp', now())`);
    const lists = { run: RUN_STATES, step: STEP_STATES, attempt: ATTEMPT_STATES };
    const seen: string[] = [];
    const allowed: string[] = [];
    for (const [entity, states] of Object.entries(lists)) {
      for (const from of states)
        for (const to of states) {
          if (from === to) continue;
          // The row is put in `from` with the check off, then moved to `to` with it on; nothing is kept.
          await owner.query('begin');
          try {
            await owner.query(`alter table ${entity} disable trigger ${entity}_transition`);
            await owner.query(`update ${entity} set status = $1 where tenant_id = 'ta'`, [from]);
            await owner.query(`alter table ${entity} enable trigger ${entity}_transition`);
            const ok = await owner.query(`update ${entity} set status = $1 where tenant_id = 'ta'`, [to]).then(
              (r) => r.rowCount === 1,
              (e: { code?: string; hint?: string }) => {
                expect([e.code, e.hint]).toEqual(['23514', 'illegal_transition']);
                return false;
              },
            );
            seen.push(`${entity}:${from}->${to}`);
            if (ok) allowed.push(`${entity}:${from}->${to}`);
            expect([entity, from, to, ok]).toEqual([entity, from, to, canTransition(entity as 'run', from, to)]);
          } finally {
            await owner.query('rollback');
          }
        }
    }
    expect(seen).toHaveLength(Object.values(lists).reduce((n, l) => n + l.length * (l.length - 1), 0));
    expect(allowed.sort()).toEqual(
      transitionRows()
        .map((r) => `${r.entity}:${r.from}->${r.to}`)
        .sort(),
    );
    await owner.query(`delete from attempt where tenant_id = 'ta'`);
  });

  it.each([
    ['uppercase', 'C'.repeat(64)],
    ['too short', 'c'.repeat(63)],
    ['too long', 'c'.repeat(65)],
    ['not hex', 'g' + 'c'.repeat(63)],
    ['multibyte', 'é' + 'c'.repeat(62)],
  ])('refuses an event hash that is not 64 lowercase hex digits (%s)', async (_, hash) => {
    await expect(
      owner.query(
        `insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
         values ('ta', '11111111-1111-4111-8111-111111111111', 99, now(), 'x', 'me', '{}', '', $1)`,
        [hash],
      ),
    ).rejects.toMatchObject({ code: '23514', constraint: 'run_event_hash_check' });
  });

  it.each([
    ['step', 'pending', 'running'],
    ['step', 'pending', 'succeeded'],
    ['run', 'queued', 'queued'],
  ])('the code table refuses or ignores %s %s -> %s', (entity, from, to) => {
    expect(canTransition(entity as 'step', from, to)).toBe(false);
  });

  it('refuses an illegal step transition in the database, even for the owner', async () => {
    await expect(
      owner.query(`update step set status = 'succeeded' where tenant_id = 'ta' and step_id = 's'`),
    ).rejects.toThrow(/illegal step transition pending -> succeeded/);
    await owner.query(`update step set status = 'queued' where tenant_id = 'ta' and step_id = 's'`);
    await expect(
      owner.query(`update step set status = 'pending' where tenant_id = 'ta' and step_id = 's'`),
    ).rejects.toThrow(/illegal step transition queued -> pending/);
  });

  it('refuses an illegal run transition in the database', async () => {
    await expect(owner.query(`update run set status = 'queued' || '' where tenant_id = 'ta'`)).resolves.toBeDefined();
    await owner.query(`update run set status = 'cancelled' where tenant_id = 'ta'`);
    await expect(owner.query(`update run set status = 'running' where tenant_id = 'ta'`)).rejects.toThrow(
      /illegal run transition cancelled -> running/,
    );
  });

  it.each([
    ['a leased item without an epoch', `'leased', null`],
    ['a ready item with an epoch', `'ready', 3`],
  ])('refuses %s (the engine finds leases by their epoch)', async (_, values) => {
    await expect(
      owner.query(
        `insert into queue_item (tenant_id, run_id, step_id, state, epoch)
         values ('ta', '11111111-1111-4111-8111-111111111111', 's', ${values})`,
      ),
    ).rejects.toMatchObject({ code: '23514', constraint: 'queue_item_lease_epoch' });
  });

  it('gives the application and system roles no UPDATE or DELETE on run_event, and refuses them for the owner too', async () => {
    await expect(t.db.withTenant('ta', (tx) => sql`update run_event set actor = 'x'`.execute(tx))).rejects.toThrow(
      /permission denied/,
    );
    await expect(t.db.withTenant('ta', (tx) => sql`delete from run_event`.execute(tx))).rejects.toThrow(
      /permission denied/,
    );
    await expect(t.db.withSystem((tx) => sql`delete from run_event`.execute(tx))).rejects.toThrow(/permission denied/);
    await expect(owner.query(`update run_event set actor = 'x'`)).rejects.toThrow(/append-only/);
    await expect(owner.query(`delete from run_event`)).rejects.toThrow(/append-only/);
  });

  it('hides tenant A rows of every run table from tenant B', async () => {
    for (const table of ['run', 'step', 'run_event', 'attempt', 'queue_item', 'artifact']) {
      const r = await t.db.withTenant('tb', (tx) =>
        sql<{ n: number }>`select count(*)::int as n from ${sql.table(table)}`.execute(tx),
      );
      expect([table, r.rows[0].n]).toEqual([table, 0]);
    }
    const a = await t.db.withTenant('ta', (tx) => sql<{ n: number }>`select count(*)::int as n from run`.execute(tx));
    expect(a.rows[0].n).toBe(1);
  });

  it('samples few rows when it analyzes the high-volume tables: no column has a statistics target above 10', async () => {
    const { rows } = await owner.query<{ table: string; column: string; target: number | null }>(
      `select c.relname as table, a.attname as column, a.attstattarget as target
         from pg_attribute a join pg_class c on c.oid = a.attrelid
        where c.relname in ('run_event', 'attempt', 'step', 'span', 'artifact') and c.relnamespace = 'public'::regnamespace
          and a.attnum > 0 and not a.attisdropped
          and (a.attstattarget is null or a.attstattarget < 0 or a.attstattarget > 10)`,
    );
    expect(rows).toEqual([]);
  });
});
