import pg from 'pg';
import { TRIGGER_RULES } from '../../src/modules/dags/dag-definition';
import { RULES_MET_BY_SUCCESS } from '../../src/modules/runs/run-plan';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/** ordo_trigger_decision, the one home of the trigger rules, on every rule and outcome mix. */
describe('trigger rules (ordo_trigger_decision)', () => {
  let db: TestDatabase;
  let client: pg.Client;
  beforeAll(async () => {
    db = await createTestDatabase();
    client = new pg.Client({ connectionString: db.systemUrl });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await db?.drop();
  });

  const decide = async (rule: string | null, total: number, pending: number, failed: number, skipped: number) =>
    (
      await client.query<{ d: string }>('select ordo_trigger_decision($1, $2, $3, $4, $5) as d', [
        rule,
        total,
        pending,
        failed,
        skipped,
      ])
    ).rows[0].d;

  // [rule, total, pending, failed, skipped, decision]; succeeded = total - pending - failed - skipped.
  const cases: [string | null, number, number, number, number, string][] = [
    [null, 2, 1, 0, 0, 'wait'],
    [null, 2, 0, 0, 0, 'ready'],
    [null, 2, 1, 1, 0, 'upstream_failed'],
    [null, 2, 1, 0, 1, 'upstream_skipped'],
    ['all_success', 2, 0, 1, 1, 'upstream_failed'],
    ['all_done', 2, 1, 1, 0, 'wait'],
    ['all_done', 3, 0, 1, 1, 'ready'],
    ['all_failed', 2, 1, 1, 0, 'wait'],
    ['all_failed', 2, 0, 2, 0, 'ready'],
    ['all_failed', 2, 1, 0, 0, 'trigger_rule'],
    ['all_failed', 2, 1, 0, 1, 'trigger_rule'],
    ['all_skipped', 2, 0, 0, 2, 'ready'],
    ['all_skipped', 2, 1, 1, 0, 'trigger_rule'],
    ['one_success', 3, 2, 0, 0, 'ready'],
    ['one_success', 3, 1, 1, 1, 'wait'],
    ['one_success', 2, 0, 1, 1, 'trigger_rule'],
    ['one_failed', 3, 2, 1, 0, 'ready'],
    ['one_failed', 2, 0, 0, 1, 'trigger_rule'],
    ['one_done', 3, 2, 1, 0, 'ready'],
    ['one_done', 2, 1, 0, 1, 'wait'],
    ['one_done', 2, 0, 0, 2, 'trigger_rule'],
    ['none_failed', 2, 0, 0, 1, 'ready'],
    ['none_failed', 2, 1, 1, 0, 'upstream_failed'],
    ['none_failed', 2, 1, 0, 1, 'wait'],
    ['none_skipped', 2, 0, 1, 0, 'ready'],
    ['none_skipped', 2, 1, 0, 1, 'upstream_skipped'],
    ['none_failed_min_one_success', 2, 0, 0, 1, 'ready'],
    ['none_failed_min_one_success', 2, 0, 0, 2, 'upstream_skipped'],
    ['none_failed_min_one_success', 2, 1, 1, 0, 'upstream_failed'],
  ];
  it.each(cases)('%s with %i deps, %i pending, %i failed, %i skipped: %s', async (rule, t, p, f, k, want) => {
    expect(await decide(rule, t, p, f, k)).toBe(want);
  });

  it('decides every rule the DAG format accepts, and the run plan agrees on dependencies that all succeeded', async () => {
    for (const rule of TRIGGER_RULES) {
      const d = await decide(rule, 2, 0, 0, 0);
      expect(['ready', 'trigger_rule', 'upstream_skipped']).toContain(d);
      expect(RULES_MET_BY_SUCCESS.has(rule)).toBe(d === 'ready');
    }
  });
});
