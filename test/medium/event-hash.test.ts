import fc from 'fast-check';
import pg from 'pg';
import { canonicalJson } from '../../src/core/json/canonical-json';
import type { JsonObject } from '../../src/modules/plugins/plugin';
import { chainHash, hashedBody } from '../../src/modules/runs/run-events';
import { fuzzRuns } from '../support/fuzz/http-fuzz';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * An event's hash has one reference, the code's (chainHash of hashedBody, which the offline
 * verifier uses); the engine's functions compute it in the database (ordo_event_hash). Both must
 * agree on every event, whatever its strings (quotes, control characters, any Unicode) and data.
 */
describe('the event hash in the database and in the code', () => {
  let t: TestDatabase;
  let system: pg.Client;
  beforeAll(async () => {
    t = await createTestDatabase();
    system = new pg.Client({ connectionString: t.systemUrl });
    await system.connect();
  });
  afterAll(async () => {
    await system.end();
    await t.drop();
  });

  const text = fc.oneof(
    fc.string({ unit: 'grapheme', maxLength: 40 }),
    fc.string({ unit: 'binary', maxLength: 40 }).map((s) => s.replace(/\u0000/g, '')),
    fc.constantFrom('', '"', '\\', '\u2028', '</script>', 'step.succeeded', 'é'),
  );
  const event = fc.record({
    prevHash: fc.oneof(fc.constant(''), fc.stringMatching(/^[0-9a-f]{64}$/)),
    runId: fc.uuid(),
    seq: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
    createdAt: fc
      .date({ min: new Date('2000-01-01'), max: new Date('2999-12-31'), noInvalidDate: true })
      .map((d) => d.toISOString()),
    type: text,
    stepId: fc.option(text, { nil: null }),
    attempt: fc.option(fc.integer({ min: 1, max: 2 ** 31 - 1 }), { nil: null }),
    actor: text,
    data: fc
      .jsonValue({ maxDepth: 3 })
      .map((v) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? v : { v })),
  });

  it(`agrees with the code on ${fuzzRuns(300)} generated events`, async () => {
    await fc.assert(
      fc.asyncProperty(event, async (e) => {
        const data = JSON.parse(JSON.stringify(e.data)) as JsonObject;
        const code = chainHash(e.prevHash, hashedBody({ ...e, data }));
        const { rows } = await system.query<{ h: string }>(
          'select ordo_event_hash($1, $2, $3, $4, $5, $6, $7, $8, $9) as h',
          [e.prevHash, e.runId, e.seq, e.createdAt, e.type, e.stepId, e.attempt, e.actor, canonicalJson(data)],
        );
        expect(rows[0].h).toBe(code);
      }),
      { numRuns: fuzzRuns(300) },
    );
  });
});
