import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * Where a table without a distributed tenant_id goes on Citus (docs/scaling.md):
 * - reference: no tenant_id; replicated to every node (`create_reference_table`), so tenant tables
 *   may point to it with a foreign key and join it on the node that holds their shard;
 * - instance: no tenant_id; belongs to the instance, not to a tenant, and stays on the coordinator;
 * - local: has a tenant_id column but stays on the coordinator, for the reason given.
 * Every other table with a tenant_id column is a tenant table, distributed by it.
 */
type Placement = { kind: 'reference' | 'instance' | 'local'; reason: string };

/** Ordo's tables in public that are not distributed by tenant_id. A new table must be added here or be a tenant table. */
const NOT_DISTRIBUTED: Record<string, Placement> = {
  tenant: {
    kind: 'reference',
    reason:
      'the tenant registry: one small row per tenant, read on every request and by the system scans; every tenant table may point to it',
  },
  plan: { kind: 'reference', reason: 'named sets of limits, few and rarely written; tenant_plan points to it' },
  state_transition: {
    kind: 'reference',
    reason: "the allowed status changes, written only by migrations; the transition triggers' lists come from it",
  },
  platform_token: { kind: 'instance', reason: "platform operators' tokens: they belong to no tenant" },
  rate_limit: {
    kind: 'instance',
    reason: "the API rate limiter's counters (rate-limiter-flexible's layout, one text key); Redis replaces it",
  },
  ordo_migration: { kind: 'instance', reason: "the migrator's ledger: migrations run on the coordinator" },
  ordo_function: { kind: 'instance', reason: "the migrator's checksums of db/functions, applied on the coordinator" },
  console_session: {
    kind: 'local',
    reason:
      "found by the session id's hash before its tenant is known, on every console request; an operator's session has no tenant",
  },
  operator_audit: {
    kind: 'local',
    reason:
      "the platform operators' log: one hash chain numbered by seq across all tenants, tenant_id null for plan actions",
  },
};

/** The distribution column's type: every tenant table's tenant_id has it, so all of them share one co-location group. */
const TENANT_ID_TYPE = 'text';

type Kind = 'tenant' | Placement['kind'] | 'unclassified' | 'outside';

interface TableRow {
  table: string;
  tenant_id_type: string | null;
  tenant_id_not_null: boolean | null;
  has_pk: boolean;
}
interface ConstraintRow {
  table: string;
  schema: string;
  name: string;
  type: 'p' | 'u' | 'x' | 'f';
  columns: string[];
  ref_schema: string | null;
  ref_table: string | null;
  ref_columns: string[] | null;
}
interface SequenceColumnRow {
  table: string;
  column: string;
  type: string;
}
interface IndexRow {
  table: string;
  name: string;
  first_column: string | null;
}

const CONSTRAINT_NAMES = { p: 'primary key', u: 'unique constraint', x: 'exclusion constraint' } as const;

/**
 * Reads the catalog of `schema` and returns every way its tables would not distribute by
 * tenant_id, one sentence each naming the table and the constraint; an empty list means the
 * schema distributes. The rules are Citus's (keys of a distributed table include the distribution
 * column; foreign keys run between co-located tables on it, from a distributed table to a
 * reference table, or among reference and coordinator tables), made stricter by Ordo's own
 * (tenant_id leads every key, so a key is also an index on the tenant's rows).
 */
async function distributionViolations(
  c: pg.ClientBase,
  schema: string,
  notDistributed: Record<string, Placement>,
): Promise<string[]> {
  const tables = (
    await c.query<TableRow>(
      `select c.relname::text as table, format_type(a.atttypid, a.atttypmod) as tenant_id_type,
              a.attnotnull as tenant_id_not_null,
              exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'p') as has_pk
         from pg_class c
         join pg_namespace n on n.oid = c.relnamespace
         left join pg_attribute a on a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped
        where n.nspname = $1 and c.relkind in ('r', 'p') and not c.relispartition
        order by 1`,
      [schema],
    )
  ).rows;
  // Constraints of the schema's tables, and foreign keys into them from other schemas; a
  // partition's copies of its parent's constraints (conparentid) are the parent's.
  const constraints = (
    await c.query<ConstraintRow>(
      `select r.relname::text as table, rn.nspname::text as schema, k.conname::text as name, k.contype as type,
              array(select a.attname::text from unnest(k.conkey) with ordinality u(n, i)
                      join pg_attribute a on a.attrelid = k.conrelid and a.attnum = u.n order by u.i) as columns,
              fn.nspname::text as ref_schema, f.relname::text as ref_table,
              case when k.contype = 'f' then
                array(select a.attname::text from unnest(k.confkey) with ordinality u(n, i)
                        join pg_attribute a on a.attrelid = k.confrelid and a.attnum = u.n order by u.i) end as ref_columns
         from pg_constraint k
         join pg_class r on r.oid = k.conrelid
         join pg_namespace rn on rn.oid = r.relnamespace
         left join pg_class f on f.oid = k.confrelid
         left join pg_namespace fn on fn.oid = f.relnamespace
        where k.contype in ('p', 'u', 'x', 'f') and k.conparentid = 0 and not r.relispartition
          and (rn.nspname = $1 or (k.contype = 'f' and fn.nspname = $1))
        order by 1, 3`,
      [schema],
    )
  ).rows;
  // Unique indexes that back no constraint; the first key column is null for an expression.
  const indexes = (
    await c.query<IndexRow>(
      `select t.relname::text as table, i.relname::text as name,
              (select a.attname::text from pg_attribute a where a.attrelid = t.oid and a.attnum = x.indkey[0] and x.indkey[0] > 0)
                as first_column
         from pg_index x
         join pg_class i on i.oid = x.indexrelid
         join pg_class t on t.oid = x.indrelid
         join pg_namespace n on n.oid = t.relnamespace
        where n.nspname = $1 and x.indisunique and t.relkind in ('r', 'p') and not t.relispartition
          and not exists (select 1 from pg_constraint k
                           where k.conindid = x.indexrelid and k.conrelid = x.indrelid and k.contype in ('p', 'u', 'x'))
        order by 1, 2`,
      [schema],
    )
  ).rows;

  // Columns numbered by a sequence: an identity column or a nextval() default.
  const numbered = (
    await c.query<SequenceColumnRow>(
      `select c.relname::text as table, a.attname::text as column, format_type(a.atttypid, a.atttypmod) as type
         from pg_attribute a
         join pg_class c on c.oid = a.attrelid
         join pg_namespace n on n.oid = c.relnamespace
         left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
        where n.nspname = $1 and c.relkind in ('r', 'p') and not c.relispartition and a.attnum > 0 and not a.attisdropped
          and (a.attidentity <> '' or pg_get_expr(d.adbin, d.adrelid) like 'nextval(%')
        order by 1, 2`,
      [schema],
    )
  ).rows;

  const out: string[] = [];
  const kinds = new Map<string, Kind>();
  for (const t of tables) {
    const placement = notDistributed[t.table];
    if (t.tenant_id_type !== null) {
      if (!placement) kinds.set(t.table, 'tenant');
      else if (placement.kind === 'local') kinds.set(t.table, 'local');
      else {
        kinds.set(t.table, placement.kind);
        out.push(
          `${t.table}: has a tenant_id column but is listed as ${placement.kind}; tenant rows are distributed by tenant_id or listed as local`,
        );
      }
    } else if (!placement) {
      kinds.set(t.table, 'unclassified');
      out.push(`${t.table}: has no tenant_id column and is not listed as a reference or instance table`);
    } else if (placement.kind === 'local') {
      kinds.set(t.table, 'instance');
      out.push(`${t.table}: is listed as local but has no tenant_id column; list it as instance`);
    } else kinds.set(t.table, placement.kind);
  }
  for (const name of Object.keys(notDistributed))
    if (!kinds.has(name))
      out.push(`${name}: is listed as ${notDistributed[name].kind} but is not a table in ${schema}`);

  const tenantTables = tables.filter((t) => kinds.get(t.table) === 'tenant');
  for (const t of tenantTables) {
    if (t.tenant_id_type !== TENANT_ID_TYPE)
      out.push(`${t.table}: tenant_id is ${t.tenant_id_type}, not ${TENANT_ID_TYPE} like every other tenant table's`);
    if (!t.tenant_id_not_null) out.push(`${t.table}: tenant_id is nullable`);
    if (!t.has_pk) out.push(`${t.table}: has no primary key`);
  }
  for (const col of numbered)
    if (kinds.get(col.table) === 'tenant' && col.type !== 'bigint')
      out.push(`${col.table}: ${col.column} is numbered by a sequence but is ${col.type}, not bigint`);
  for (const k of constraints) {
    if (k.type === 'f') continue;
    if (kinds.get(k.table) === 'tenant' && k.columns[0] !== 'tenant_id')
      out.push(
        `${k.table}: ${CONSTRAINT_NAMES[k.type]} ${k.name} (${k.columns.join(', ')}) does not lead with tenant_id`,
      );
  }
  for (const i of indexes)
    if (kinds.get(i.table) === 'tenant' && i.first_column !== 'tenant_id')
      out.push(`${i.table}: unique index ${i.name} does not lead with tenant_id`);

  const kindOf = (s: string | null, t: string | null): Kind =>
    s === schema && t !== null ? (kinds.get(t) ?? 'unclassified') : 'outside';
  for (const k of constraints) {
    if (k.type !== 'f') continue;
    const from = kindOf(k.schema, k.table);
    const to = kindOf(k.ref_schema, k.ref_table);
    if (from === 'unclassified' || to === 'unclassified') continue; // reported above
    const name = (s: string | null, t: string | null) => (s === schema ? t : `${s}.${t}`);
    const fk = `${name(k.schema, k.table)}: foreign key ${k.name} (${k.columns.join(', ')}) -> ${name(k.ref_schema, k.ref_table)} (${(k.ref_columns ?? []).join(', ')})`;
    if (from === 'tenant') {
      if (to === 'tenant') {
        if (k.columns[0] !== 'tenant_id' || k.ref_columns?.[0] !== 'tenant_id')
          out.push(`${fk} does not lead with tenant_id on both sides`);
      } else if (to !== 'reference')
        out.push(`${fk} points to a table that is neither a tenant table nor a reference table (${to})`);
    } else if (from === 'reference') {
      if (to !== 'reference') out.push(`${fk}: a reference table points only to reference tables (this one is ${to})`);
    } else if (to === 'tenant')
      out.push(`${fk}: a table kept on the coordinator (${from}) cannot point to a tenant table`);
  }
  return out;
}

describe('the schema distributes by tenant_id (Citus)', () => {
  let tdb: TestDatabase;
  let owner: pg.Client;

  beforeAll(async () => {
    tdb = await createTestDatabase();
    owner = new pg.Client({ connectionString: tdb.ownerUrl });
    await owner.connect();
  });
  afterAll(async () => {
    await owner?.end();
    await tdb?.drop();
  });

  it("finds no key, unique index or foreign key that would not distribute in Ordo's schema", async () => {
    expect(await distributionViolations(owner, 'public', NOT_DISTRIBUTED)).toEqual([]);
  });

  it('classifies the engine tables as tenant tables and every other table by the list', async () => {
    const { rows } = await owner.query<{ table: string; tenant: boolean }>(
      `select c.relname::text as table,
              exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped) as tenant
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition`,
    );
    const distributed = rows.filter((r) => r.tenant && !NOT_DISTRIBUTED[r.table]).map((r) => r.table);
    expect(distributed).toEqual(expect.arrayContaining(['run', 'step', 'attempt', 'run_event', 'queue_item', 'dag']));
    const listed = rows.filter((r) => NOT_DISTRIBUTED[r.table]).map((r) => r.table);
    expect(listed.sort()).toEqual(Object.keys(NOT_DISTRIBUTED).sort());
  });

  it('names each table and constraint that would not distribute in a schema built to break the rules', async () => {
    await owner.query('begin');
    try {
      await owner.query(`
        create schema scratch;
        set local search_path to scratch;
        create table tenant (id text primary key);
        create table plan (id text primary key);
        create table instance_thing (id int primary key);
        create table good (tenant_id text not null references tenant (id), id int, plan_id text references plan (id),
          primary key (tenant_id, id), unique (tenant_id, plan_id));
        create unique index good_plan_idx on good (tenant_id, plan_id) where plan_id is not null;
        create table pk_first (tenant_id text not null, id int, primary key (id, tenant_id));
        create table uq_first (tenant_id text not null, id int, code text, primary key (tenant_id, id),
          constraint uq_first_code_uq unique (code, tenant_id));
        create table idx_expr (tenant_id text not null, id int, name text, primary key (tenant_id, id));
        create unique index idx_expr_lower_idx on idx_expr (lower(name), tenant_id);
        create unique index idx_expr_name_idx on idx_expr (name);
        create table fk_refside (tenant_id text not null, id int, good_id int, primary key (tenant_id, id),
          constraint fk_refside_good_fk foreign key (good_id, tenant_id) references good (id, tenant_id));
        create table fk_instance (tenant_id text not null, id int references instance_thing (id), primary key (tenant_id, id));
        create table loose (tenant_id text, id int, primary key (id));
        create table keyless (tenant_id text not null, id int);
        create table wrong_type (tenant_id uuid not null primary key);
        create table unlisted (id int primary key);
        create table points_in (id int primary key, tenant_id_ text, good_id int,
          constraint points_in_good_fk foreign key (tenant_id_, good_id) references good (tenant_id, id));
        create table listed_ref (tenant_id text not null primary key);
        create table counted (tenant_id text not null, id serial, n int generated always as identity,
          big bigint generated always as identity, primary key (tenant_id, id));
        create table parted (tenant_id text not null, at date not null, id bigint, primary key (tenant_id, at, id))
          partition by range (at);
        create table parted_2026 partition of parted for values from ('2026-01-01') to ('2027-01-01');
        create table parted_ref (tenant_id text not null, id int, at date, parted_id bigint, primary key (tenant_id, id),
          foreign key (tenant_id, at, parted_id) references parted (tenant_id, at, id));
        create table parted_bad (tenant_id text not null, at date not null, primary key (at, tenant_id))
          partition by range (at);
        create table parted_bad_2026 partition of parted_bad for values from ('2026-01-01') to ('2027-01-01');
        create table ref_bad (id int primary key, thing int references instance_thing (id));
        create table local_log (seq int primary key, tenant_id text references tenant (id), good_tenant text, good_id int,
          constraint local_log_good_fk foreign key (good_tenant, good_id) references good (tenant_id, id));
      `);
      const found = await distributionViolations(owner, 'scratch', {
        tenant: { kind: 'reference', reason: 'registry' },
        plan: { kind: 'reference', reason: 'limits' },
        instance_thing: { kind: 'instance', reason: 'no tenant' },
        points_in: { kind: 'instance', reason: 'no tenant' },
        listed_ref: { kind: 'reference', reason: 'wrongly' },
        ref_bad: { kind: 'reference', reason: 'shared' },
        local_log: { kind: 'local', reason: 'one chain' },
        gone: { kind: 'instance', reason: 'dropped long ago' },
      });
      expect(found.sort()).toEqual(
        [
          'listed_ref: has a tenant_id column but is listed as reference; tenant rows are distributed by tenant_id or listed as local',
          'unlisted: has no tenant_id column and is not listed as a reference or instance table',
          'gone: is listed as instance but is not a table in scratch',
          'pk_first: primary key pk_first_pkey (id, tenant_id) does not lead with tenant_id',
          'uq_first: unique constraint uq_first_code_uq (code, tenant_id) does not lead with tenant_id',
          'idx_expr: unique index idx_expr_lower_idx does not lead with tenant_id',
          'idx_expr: unique index idx_expr_name_idx does not lead with tenant_id',
          'fk_refside: foreign key fk_refside_good_fk (good_id, tenant_id) -> good (id, tenant_id) does not lead with tenant_id on both sides',
          'fk_instance: foreign key fk_instance_id_fkey (id) -> instance_thing (id) points to a table that is neither a tenant table nor a reference table (instance)',
          'loose: tenant_id is nullable',
          'loose: primary key loose_pkey (id) does not lead with tenant_id',
          'keyless: has no primary key',
          'parted_bad: primary key parted_bad_pkey (at, tenant_id) does not lead with tenant_id',
          'counted: id is numbered by a sequence but is integer, not bigint',
          'counted: n is numbered by a sequence but is integer, not bigint',
          "wrong_type: tenant_id is uuid, not text like every other tenant table's",
          'points_in: foreign key points_in_good_fk (tenant_id_, good_id) -> good (tenant_id, id): a table kept on the coordinator (instance) cannot point to a tenant table',
          'ref_bad: foreign key ref_bad_thing_fkey (thing) -> instance_thing (id): a reference table points only to reference tables (this one is instance)',
          'local_log: foreign key local_log_good_fk (good_tenant, good_id) -> good (tenant_id, id): a table kept on the coordinator (local) cannot point to a tenant table',
        ].sort(),
      );
    } finally {
      await owner.query('rollback');
    }
  });
});
