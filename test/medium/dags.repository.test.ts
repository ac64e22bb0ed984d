import pg from 'pg';
import { DagsRepository, type NewDagVersion } from '../../src/modules/dags/dags.repository';
import { dagDefinition } from '../../src/modules/dags/dag-definition';
import { canonicalHash } from '../../src/core/json/canonical-json';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const repo = new DagsRepository();

function newVersion(dagId: string, version: number, note = 'x'): NewDagVersion {
  const definition = dagDefinition.parse({ id: dagId, description: note, steps: [{ id: 'a', plugin: 'noop' }] });
  return {
    dagId,
    version,
    contentHash: canonicalHash(definition),
    definition,
    sourceFormat: 'json',
    owner: 'alice',
    signature: null,
    bundleHash: null,
  };
}

async function withOwner<T>(t: TestDatabase, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: t.ownerUrl });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

describe('DagsRepository and the dag_version table', () => {
  let t: TestDatabase;
  beforeAll(async () => {
    t = await createTestDatabase();
    await t.db.withSystem(async (tx) => {
      await tx
        .insertInto('tenant')
        .values([
          { id: 'ta', name: 'A' },
          { id: 'tb', name: 'B' },
        ])
        .execute();
    });
    await t.db.withTenant('ta', async (tx) => {
      await repo.lockDag(tx, 'etl');
      await repo.insertVersion(tx, newVersion('etl', 1, 'one'));
      await repo.lockDag(tx, 'etl');
      await repo.insertVersion(tx, newVersion('etl', 2, 'two'));
    });
  });
  afterAll(async () => t.drop());

  it('finds a version by number and the latest active one when the number is omitted', async () => {
    await t.db.withTenant('ta', async (tx) => {
      expect((await repo.findVersion(tx, 'etl', 1))?.definition.description).toBe('one');
      const latest = await repo.findVersion(tx, 'etl');
      expect(latest).toMatchObject({ dagId: 'etl', version: 2, status: 'active', owner: 'alice', signature: null });
      expect(latest?.definition.steps[0].timeout).toBe(300_000);
      expect(latest?.createdAt).toBeInstanceOf(Date);
      expect(await repo.lockDag(tx, 'etl')).toBe(2);
    });
  });

  it('skips disabled versions when finding the latest active one and records who disabled it', async () => {
    await t.db.withTenant('ta', async (tx) => {
      const r = await repo.setStatus(tx, 'etl', 2, 'disabled', 'bob');
      expect(r).toMatchObject({ changed: true, record: { status: 'disabled' } });
      expect(r?.record.disabledAt).toBeInstanceOf(Date);
      expect((await repo.setStatus(tx, 'etl', 2, 'disabled', 'carol'))?.changed).toBe(false);
      expect((await repo.findVersion(tx, 'etl'))?.version).toBe(1);
      expect(await repo.statusChanges(tx, 'etl', 2)).toEqual([
        expect.objectContaining({ status: 'disabled', actor: 'bob' }),
      ]);
      await repo.setStatus(tx, 'etl', 2, 'active', 'bob');
      expect((await repo.findVersion(tx, 'etl'))?.version).toBe(2);
    });
  });

  it('hides tenant A versions from tenant B', async () => {
    await t.db.withTenant('tb', async (tx) => {
      expect(await repo.findVersion(tx, 'etl')).toBeUndefined();
      expect(await repo.findVersion(tx, 'etl', 1)).toBeUndefined();
      expect(await repo.list(tx, { limit: 10 })).toEqual([]);
      expect(await repo.setStatus(tx, 'etl', 1, 'disabled', 'mallory')).toBeUndefined();
    });
    await t.db.withTenant('ta', async (tx) => expect((await repo.findVersion(tx, 'etl', 1))?.status).toBe('active'));
  });

  it('refuses an UPDATE of the definition even on the owner connection', async () => {
    await withOwner(t, async (c) => {
      await expect(
        c.query(`update dag_version set definition = '{}'::jsonb where dag_id = 'etl' and version = 1`),
      ).rejects.toThrow(/immutable/);
      await expect(c.query(`update dag_version set owner = 'eve' where dag_id = 'etl'`)).rejects.toThrow(/immutable/);
      const r = await c.query(
        `select definition->>'description' as d, owner from dag_version where dag_id = 'etl' and version = 1`,
      );
      expect(r.rows[0]).toEqual({ d: 'one', owner: 'alice' });
    });
  });

  it('gives the application role no UPDATE of content columns and no DELETE', async () => {
    const c = new pg.Client({ connectionString: t.appUrl });
    await c.connect();
    try {
      await c.query('begin');
      await c.query(`select set_config('app.tenant_id', 'ta', true)`);
      await expect(c.query(`update dag_version set definition = '{}'::jsonb where dag_id = 'etl'`)).rejects.toThrow(
        /permission denied/,
      );
      await c.query('rollback');
      await c.query('begin');
      await c.query(`select set_config('app.tenant_id', 'ta', true)`);
      await expect(c.query(`delete from dag_version where dag_id = 'etl'`)).rejects.toThrow(/permission denied/);
      await c.query('rollback');
      await c.query('begin');
      await c.query(`select set_config('app.tenant_id', 'ta', true)`);
      await expect(c.query(`delete from dag_version_status_change`)).rejects.toThrow(/permission denied/);
      await c.query('rollback');
    } finally {
      await c.end();
    }
  });

  it('rejects a second version with the same content hash', async () => {
    await expect(
      t.db.withTenant('ta', async (tx) => {
        await repo.lockDag(tx, 'etl');
        await repo.insertVersion(tx, { ...newVersion('etl', 1, 'one'), version: 3 });
      }),
    ).rejects.toThrow(/dag_version_content_uq/);
  });

  it('lists dag_id ascending then version descending with a keyset', async () => {
    await t.db.withTenant('ta', async (tx) => {
      await repo.lockDag(tx, 'alpha');
      await repo.insertVersion(tx, newVersion('alpha', 1));
    });
    await t.db.withTenant('ta', async (tx) => {
      const all = await repo.list(tx, { limit: 10 });
      expect(all.map((v) => `${v.dagId}@${v.version}`)).toEqual(['alpha@1', 'etl@2', 'etl@1']);
      const page = await repo.list(tx, { limit: 10, after: { dagId: 'etl', version: 2 } });
      expect(page.map((v) => `${v.dagId}@${v.version}`)).toEqual(['etl@1']);
    });
  });
});
