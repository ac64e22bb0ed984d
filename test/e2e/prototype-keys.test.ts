import { errorEnvelopeSchema } from '../../src/core/errors/error-envelope';
import { SecretsService } from '../../src/modules/secrets/secrets.service';
import { renderTemplate } from '../../src/modules/templating/template';
import { PROTOTYPE_KEYS } from '../support/fuzz/arbitrary-from-schema';
import { startTestApp, type TestApp, type TestResponse } from '../support/test-app';

/**
 * Strings that name members of Object.prototype (`constructor`, `__proto__`, `toString`, ...) reach
 * code that looks things up by caller-given names. Each is an ordinary string there: refused with a
 * clear 400 where it is not valid, never a 500, and never mistaken for a key that is present.
 */
describe('prototype property names as caller input', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const expectError = (r: TestResponse, status: number, code: string) => {
    expect({ status: r.status, code: r.body?.error?.code }).toEqual({ status, code });
    expect(errorEnvelopeSchema.safeParse(r.body).success).toBe(true);
    expect(r.body.error.traceId).toMatch(/^[0-9a-f]{32}$/);
  };

  beforeAll(async () => {
    app = await startTestApp();
    as = { token: app.adminToken, tenantId: app.tenantId };
    const dag = await app.request('POST', '/api/v1/dags', {
      as,
      body: { id: 'proto-keys', steps: [{ id: 's1', plugin: 'noop' }] },
    });
    expect(dag.status).toBe(201);
    const typed = await app.request('POST', '/api/v1/dags', {
      as,
      body: {
        id: 'proto-inputs',
        inputs: {
          type: 'object',
          properties: { constructor: { type: 'string' }, toString: { type: 'string' }, valueOf: { type: 'number' } },
          required: ['constructor'],
        },
        steps: [{ id: 's1', plugin: 'noop' }],
      },
    });
    expect(typed.status).toBe(201);
  });
  afterAll(async () => app?.close());

  it.each(['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', ' constructor ', 'CONSTRUCTOR'])(
    'answers POST /api/v1/schedules with cron %p with 400 INVALID_CRON',
    async (cron) => {
      const r = await app.request('POST', '/api/v1/schedules', {
        as,
        body: { dagId: 'proto-keys', cron, timezone: 'UTC' },
      });
      expectError(r, 400, 'INVALID_CRON');
      expect(r.body.error.message).toBe('expected 5 or 6 fields, got 1');
    },
  );

  it('answers the cron preview of every prototype property name with 400 INVALID_CRON', async () => {
    for (const cron of PROTOTYPE_KEYS) {
      const r = await app.request(
        'GET',
        `/api/v1/schedules/preview?cron=${encodeURIComponent(cron)}&timezone=UTC&count=3`,
        { as },
      );
      expect({ cron, status: r.status }).toEqual({ cron, status: 400 });
      expectError(r, 400, 'INVALID_CRON');
    }
  });

  it('answers PATCH /api/v1/schedules/{id} with cron constructor or __proto__ with 400 and keeps the schedule', async () => {
    const created = await app.request('POST', '/api/v1/schedules', {
      as,
      body: { dagId: 'proto-keys', cron: '@daily', timezone: 'UTC' },
    });
    expect(created.status).toBe(201);
    for (const cron of ['constructor', '__proto__']) {
      const r = await app.request('PATCH', `/api/v1/schedules/${created.body.id}`, { as, body: { cron } });
      expectError(r, 400, 'INVALID_CRON');
    }
    const after = await app.request('GET', `/api/v1/schedules/${created.body.id}`, { as });
    expect(after.body.cron).toBe('@daily');
  });

  it('reads run inputs named like prototype members only from the inputs themselves', async () => {
    // `constructor` is required: an object without it is refused, though every object inherits one.
    const missing = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'proto-inputs', runToken: 'proto-missing', inputs: {} },
    });
    expectError(missing, 400, 'INVALID_INPUTS');
    expect(missing.body.error.message).toMatch(/^inputs constructor:/);
    // `toString` and `valueOf` are optional: absent, the inherited functions are not taken for them.
    const ok = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'proto-inputs', runToken: 'proto-ok', inputs: { constructor: 'x' } },
    });
    expect(ok.status).toBe(201);
    const typed = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'proto-inputs', runToken: 'proto-typed', inputs: { constructor: 'x', valueOf: 'nope' } },
    });
    expectError(typed, 400, 'INVALID_INPUTS');
    expect(typed.body.error.message).toMatch(/^inputs valueOf:/);
  });

  it('resolves secrets named __proto__ and constructor as ordinary names, for templates to use', async () => {
    for (const name of ['__proto__', 'constructor']) {
      const put = await app.request('PUT', `/api/v1/secrets/${name}`, { as, body: { value: `v-${name}` } });
      expect({ name, status: put.status }).toEqual({ name, status: 200 });
    }
    const secrets = app.ordo.app.get(SecretsService, { strict: false });
    const values = await secrets.resolve(app.tenantId, ['__proto__', 'constructor']);
    expect(Object.entries(values).sort()).toEqual([
      ['__proto__', 'v-__proto__'],
      ['constructor', 'v-constructor'],
    ]);
    const rendered = renderTemplate(
      { a: '${{ secrets.__proto__ }}', b: '${{ secrets.constructor }}' },
      { inputs: {}, steps: {}, secrets: values },
    );
    expect(rendered).toEqual({
      value: { a: 'v-__proto__', b: 'v-constructor' },
      usedSecrets: ['__proto__', 'constructor'],
    });
  });
});
