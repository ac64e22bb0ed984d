import { sql } from 'kysely';
import pg from 'pg';
import { APP_ROLE, SYSTEM_ROLE } from '../../src/core/database/migrator';
import { AuthRepository } from '../../src/modules/auth/auth.repository';
import { IdempotencyRepository } from '../../src/modules/idempotency/idempotency.repository';
import { TenantsRepository } from '../../src/modules/tenants/tenants.repository';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const A = 'rls-a';
const B = 'rls-b';

/** Every table in public that holds tenant data: a tenant_id column, or the tenant registry itself. */
async function tenantTables(c: pg.Client): Promise<{ table: string; column: string }[]> {
  const { rows } = await c.query<{ table: string; column: string }>(`
    select c.relname as table, case when c.relname = 'tenant' then 'id' else 'tenant_id' end as column
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition
       and (c.relname = 'tenant' or exists (
             select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped))
     order by 1`);
  return rows;
}

describe('row-level security on the application role', () => {
  let tdb: TestDatabase;
  let owner: pg.Client;
  let app: pg.Client;
  let tables: { table: string; column: string }[];

  /** Runs `fn` on the app-role connection inside a transaction bound to `tenant` (or to none). */
  const asTenant = async <T>(tenant: string | null, fn: () => Promise<T>): Promise<T> => {
    await app.query('begin');
    try {
      if (tenant !== null) await app.query(`select set_config('app.tenant_id', $1, true)`, [tenant]);
      return await fn();
    } finally {
      await app.query('rollback');
    }
  };
  const rlsError = (p: Promise<unknown>) => expect(p).rejects.toMatchObject({ code: '42501' });

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const tenants = new TenantsRepository();
    const auth = new AuthRepository();
    const idem = new IdempotencyRepository();
    for (const t of [A, B]) {
      await tenants.insert(tdb.db.system, { id: t, name: t });
      await tdb.db.withTenant(t, async (tx) => {
        await auth.insertToken(tx, {
          jti: crypto.randomUUID(),
          subject: `${t}-admin`,
          scopes: ['orchestrator:admin'],
          description: null,
          createdBy: 'test',
          expiresAt: new Date(Date.now() + 3600_000),
        });
        await idem.claim(tx, { key: 'k1', method: 'POST', path: '/x', hash: 'h', ttlSeconds: 60 });
      });
    }
    owner = new pg.Client({ connectionString: tdb.ownerUrl });
    app = new pg.Client({ connectionString: tdb.appUrl });
    await owner.connect();
    await app.connect();
    tables = await tenantTables(owner);
  });
  afterAll(async () => {
    await app?.end();
    await owner?.end();
    await tdb?.drop();
  });

  it('finds the foundation tables among the tenant-owned ones', () => {
    expect(tables.map((t) => t.table)).toEqual(expect.arrayContaining(['tenant', 'api_token', 'idempotency_key']));
  });

  it('grants the application and system roles nothing on a partition: its rows are reached through its parent only', async () => {
    const { rows } = await owner.query<{ table: string; app: boolean; sys: boolean }>(
      `select c.relname as table,
              has_table_privilege('ordo_app', c.oid, 'select,insert,update,delete') as app,
              has_table_privilege('ordo_system', c.oid, 'select,insert,update,delete') as sys
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relispartition order by 1`,
    );
    expect(rows.map((r) => r.table)).toEqual(
      expect.arrayContaining(['attempt_default', 'run_event_default', 'span_default']),
    );
    expect(rows.filter((r) => r.app || r.sys)).toEqual([]);
  });

  it('has row-level security enabled and forced, with a tenant policy, on every tenant-owned table', async () => {
    const { rows } = await owner.query<{ table: string; enabled: boolean; forced: boolean; policies: string[] }>(
      `select c.relname as table, c.relrowsecurity as enabled, c.relforcerowsecurity as forced,
              coalesce((select array_agg(coalesce(p.qual, '') || ' / ' || coalesce(p.with_check, ''))
                          from pg_policies p where p.schemaname = 'public' and p.tablename = c.relname), '{}') as policies
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relname = any($1)`,
      [tables.map((t) => t.table)],
    );
    expect(rows).toHaveLength(tables.length);
    for (const r of rows) {
      expect({ table: r.table, enabled: r.enabled, forced: r.forced }).toEqual({
        table: r.table,
        enabled: true,
        forced: true,
      });
      expect({ table: r.table, keyed: r.policies.some((p) => p.includes('ordo_current_tenant()')) }).toEqual({
        table: r.table,
        keyed: true,
      });
    }
  });

  it('connects the app as a role that owns no table, is no superuser and cannot bypass RLS', async () => {
    const { rows: roles } = await owner.query<{ rolname: string; rolsuper: boolean; rolbypassrls: boolean }>(
      'select rolname, rolsuper, rolbypassrls from pg_roles where rolname = any($1)',
      [[APP_ROLE, SYSTEM_ROLE]],
    );
    expect(roles.find((r) => r.rolname === APP_ROLE)).toEqual({
      rolname: APP_ROLE,
      rolsuper: false,
      rolbypassrls: false,
    });
    expect(roles.find((r) => r.rolname === SYSTEM_ROLE)).toMatchObject({ rolsuper: false });
    const { rows: owned } = await owner.query(
      `select schemaname, tablename from pg_tables where tableowner = any($1)
       union all select schemaname, viewname from pg_views where viewowner = any($1)`,
      [[APP_ROLE, SYSTEM_ROLE]],
    );
    expect(owned).toEqual([]);
    const { rows: who } = await app.query<{ u: string }>('select current_user as u');
    expect(who[0].u).toBe(APP_ROLE);
  });

  it("shows tenant A none of tenant B's rows in any tenant-owned table", async () => {
    const sys = new pg.Client({ connectionString: tdb.systemUrl });
    await sys.connect();
    try {
      for (const { table, column } of tables) {
        const total = await sys.query<{ n: number }>(`select count(*)::int as n from ${table} where ${column} = $1`, [
          B,
        ]);
        const seen = await asTenant(A, async () => {
          try {
            const r = await app.query<{ others: number; b: number }>(
              `select count(*) filter (where ${column} <> $1)::int as others, count(*) filter (where ${column} = $2)::int as b from ${table}`,
              [A, B],
            );
            return r.rows[0];
          } catch (e) {
            if ((e as { code?: string }).code === '42501') return { others: 0, b: 0 }; // no SELECT grant at all
            throw e;
          }
        });
        expect({ table, ...seen }).toEqual({ table, others: 0, b: 0 });
        // The foundation tables do hold rows of B, so the check above is not vacuous for them.
        if (['tenant', 'api_token', 'idempotency_key'].includes(table))
          expect({ table, n: total.rows[0].n }).toEqual({ table, n: 1 });
      }
    } finally {
      await sys.end();
    }
  });

  it('shows nothing in any tenant-owned table when no tenant is set', async () => {
    for (const { table } of tables) {
      const n = await asTenant(null, async () => {
        try {
          return (await app.query<{ n: number }>(`select count(*)::int as n from ${table}`)).rows[0].n;
        } catch (e) {
          if ((e as { code?: string }).code === '42501') return 0;
          throw e;
        }
      });
      expect({ table, n }).toEqual({ table, n: 0 });
    }
  });

  it('refuses tenant A inserting rows for tenant B (RLS error)', async () => {
    await asTenant(A, () =>
      rlsError(
        app.query(
          `insert into api_token (tenant_id, jti, subject, scopes, created_by, expires_at) values ($1, gen_random_uuid(), 's', '{orchestrator:admin}', 'x', now() + interval '1 hour')`,
          [B],
        ),
      ),
    );
    await asTenant(A, () =>
      rlsError(
        app.query(
          `insert into idempotency_key (tenant_id, key, method, path, request_hash, state, expires_at) values ($1, 'k2', 'POST', '/x', 'h', 'processing', now())`,
          [B],
        ),
      ),
    );
    // Without a tenant, no insert passes either.
    await asTenant(null, () =>
      rlsError(
        app.query(
          `insert into api_token (tenant_id, jti, subject, scopes, created_by, expires_at) values ($1, gen_random_uuid(), 's', '{orchestrator:admin}', 'x', now() + interval '1 hour')`,
          [A],
        ),
      ),
    );
  });

  it('creates runs only for the tenant the creation statement binds, and refuses a transaction bound to another', async () => {
    const run = (tenant: string, token: string) =>
      JSON.stringify({
        tenant,
        now: new Date(),
        versions: [],
        runs: [
          {
            run_id: '00000000-0000-4000-8000-00000000000' + token.length,
            dag_id: 'd',
            dag_version: 1,
            content_hash: 'a'.repeat(64),
            run_token: token,
            inputs: {},
            inputs_hash: 'b'.repeat(64),
            status: 'queued',
            reason: null,
            trace_id: 'c'.repeat(32),
            requested_by: 'me',
            replay_of: null,
            rerun_of: null,
            rerun_from_step: null,
            admitted: true,
            steps_total: 0,
            steps_remaining: 0,
            event_seq: 0,
            event_hash: '',
            finished: false,
          },
        ],
        steps: [],
        events: [],
        queue: [],
      });
    // Bound to A, a creation for B is refused before anything is written.
    await asTenant(A, () =>
      expect(app.query(`select * from ordo_create_runs($1::jsonb)`, [run(B, 'x')])).rejects.toMatchObject({
        code: '42501',
      }),
    );
    // On its own, the statement binds B: the run is B's, and the binding ends with the statement.
    const made = await app.query(`select kind from ordo_create_runs($1::jsonb)`, [run(B, 'xy')]);
    expect(made.rows).toEqual([{ kind: 'created' }]);
    expect((await app.query(`select current_setting('app.tenant_id', true) as t`)).rows[0].t || null).toBeNull();
    const { rows } = await owner.query(`select tenant_id from run where run_token in ('x', 'xy')`);
    expect(rows).toEqual([{ tenant_id: B }]);
  });

  it("cannot update or delete tenant B's rows as tenant A, nor move A's rows to B", async () => {
    const changed = await asTenant(A, async () => {
      const u = await app.query(`update api_token set description = 'pwned', revoked_at = now() where tenant_id = $1`, [
        B,
      ]);
      const d = await app.query(`delete from idempotency_key where tenant_id = $1`, [B]);
      return { updated: u.rowCount, deleted: d.rowCount };
    });
    expect(changed).toEqual({ updated: 0, deleted: 0 });
    await asTenant(A, () => rlsError(app.query(`update api_token set tenant_id = $1 where tenant_id = $2`, [B, A])));
    await asTenant(A, async () => {
      const t = await app
        .query(`update tenant set name = 'pwned' where id = $1`, [B])
        .catch((e: { code?: string }) => e);
      expect(t).toEqual(expect.objectContaining({ code: '42501' }));
    });
    const { rows } = await owner.query<{ n: number }>(
      `select count(*)::int as n from api_token where tenant_id = $1 and description is null and revoked_at is null`,
      [B],
    );
    expect(rows[0].n).toBe(1);
  });

  describe('Database.withTenant (BEGIN and the binding in one round trip)', () => {
    const boundTenant = (tx: Parameters<Parameters<TestDatabase['db']['withTenant']>[1]>[0]) =>
      sql<{ t: string | null }>`select current_setting('app.tenant_id', true) as t`.execute(tx);

    it('binds the tenant for the whole transaction and not beyond it', async () => {
      const seen = await tdb.db.withTenant(A, async (tx) => {
        const first = (await boundTenant(tx)).rows[0].t;
        const count = await sql<{ n: number }>`select count(*)::int as n from tenant`.execute(tx);
        return { first, tenants: count.rows[0].n, last: (await boundTenant(tx)).rows[0].t };
      });
      expect(seen).toEqual({ first: A, tenants: 1, last: A });
      // The connection goes back to the pool unbound.
      const after = await Promise.all(
        Array.from({ length: 4 }, () =>
          tdb.db.appPool.query<{ t: string | null }>(`select current_setting('app.tenant_id', true) as t`),
        ),
      );
      for (const r of after) expect(r.rows[0].t ?? '').toBe('');
    });

    it('writes nothing when the work fails, and passes its error on', async () => {
      const failure = new Error('refused midway');
      await expect(
        tdb.db.withTenant(A, async (tx) => {
          await sql`insert into idempotency_key (tenant_id, key, method, path, request_hash, state, expires_at)
            values (${A}, 'rolled-back', 'POST', '/x', ${'0'.repeat(64)}, 'processing', now() + interval '1 hour')`.execute(
            tx,
          );
          throw failure;
        }),
      ).rejects.toBe(failure);
      const { rows } = await owner.query(`select 1 from idempotency_key where key = 'rolled-back'`);
      expect(rows).toHaveLength(0);
    });

    it('binds a tenant id with quotes and backslashes as the literal string, and it sees no rows', async () => {
      const hostile = "x'); delete from tenant; --\\";
      const seen = await tdb.db.withTenant(hostile, async (tx) => ({
        bound: (await boundTenant(tx)).rows[0].t,
        tenants: (await sql<{ n: number }>`select count(*)::int as n from tenant`.execute(tx)).rows[0].n,
      }));
      expect(seen).toEqual({ bound: hostile, tenants: 0 });
      const { rows } = await owner.query<{ n: number }>(`select count(*)::int as n from tenant where id in ($1, $2)`, [
        A,
        B,
      ]);
      expect(rows[0].n).toBe(2);
    });
  });
});
