import { sql } from 'kysely';
import pg from 'pg';
import { startTestApp, type TestApp } from '../support/test-app';

/**
 * What publishing knows of a run before it starts: template result types against the plugin's
 * config schema, the inputs templates read against the inputs schema, and literal hosts against
 * the step's egress. Problems are 400 DAG_INVALID issues with a code and a path, writing nothing;
 * a declared but not required input is a warning, returned and stored with the version.
 */
describe('publish-time checks (POST /api/v1/dags)', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };

  const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
  const versions = async () =>
    (await sql<{ n: number }>`select count(*)::int as n from dag_version`.execute(app.testDb.db.system)).rows[0].n;
  const refused = async (body: unknown) => {
    const before = await versions();
    const r = await publish(body);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('DAG_INVALID');
    expect(await versions()).toBe(before);
    return r.body.error as { message: string; details: { issues: Record<string, string>[] } };
  };

  const typed = { type: 'object', properties: { n: { type: 'integer' }, name: { type: 'string' } }, required: ['n'] };

  beforeAll(async () => {
    app = await startTestApp();
    as = { token: app.adminToken, tenantId: app.tenantId };
  });
  afterAll(async () => app.close());

  it('refuses an integer template as a cli argument, naming the step, the field and both types', async () => {
    const e = await refused({
      id: 'build',
      inputs: typed,
      steps: [{ id: 'make', plugin: 'cli', with: { command: 'echo', args: ['-n', '${{ inputs.n }}'] } }],
    });
    expect(e.details.issues).toEqual([
      {
        path: 'steps.0.with.args.1',
        step: 'make',
        code: 'TEMPLATE_TYPE_MISMATCH',
        message:
          'cli config expects string here, but ${{ inputs.n }} (declared integer by the inputs schema) yields integer',
      },
    ]);
    expect(e.message).toMatch(/^step "make": cli config expects string here/);
  });

  it('publishes the same input inside a longer argument, which yields a string', async () => {
    const r = await publish({
      id: 'build',
      inputs: typed,
      steps: [{ id: 'make', plugin: 'cli', with: { command: 'echo', args: ['-n', 'n=${{ inputs.n }}'] } }],
    });
    expect(r.status).toBe(201);
    expect(r.body.warnings).toEqual([]);
  });

  it('refuses an http step whose literal URL host the egress does not allow, and publishes it once allowed', async () => {
    const step = { id: 'call', plugin: 'http', with: { url: 'https://api.example.com/v1/items' } };
    const e = await refused({ id: 'fetch', steps: [step] });
    expect(e.details.issues).toEqual([
      expect.objectContaining({ path: 'steps.0.with.url', step: 'call', code: 'EGRESS_NOT_ALLOWED' }),
    ]);
    expect(e.details.issues[0].message).toMatch(/api\.example\.com:443.*EGRESS_DENIED/);
    const wrong = await refused({ id: 'fetch', steps: [{ ...step, egress: ['api.example.com:8443'] }] });
    expect(wrong.details.issues[0].code).toBe('EGRESS_NOT_ALLOWED');
    expect((await publish({ id: 'fetch', steps: [{ ...step, egress: ['*.example.com'] }] })).status).toBe(201);
  });

  it('publishes an http step whose host comes from a template, which cannot be known at publish', async () => {
    const r = await publish({
      id: 'fetch-any',
      inputs: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] },
      steps: [{ id: 'call', plugin: 'http', with: { url: '${{ inputs.url }}' } }],
    });
    expect(r.status).toBe(201);
    expect(r.body.warnings).toEqual([]);
  });

  it('refuses a template reading an input the schema does not declare', async () => {
    const e = await refused({
      id: 'typo',
      inputs: typed,
      steps: [{ id: 'a', plugin: 'noop', with: { output: { who: '${{ inputs.nmae }}' } } }],
    });
    expect(e.details.issues).toEqual([
      {
        path: 'steps.0.with.output.who',
        step: 'a',
        code: 'INPUT_UNDECLARED',
        message: 'template reads inputs.nmae, which the inputs schema does not declare (inputs declares n, name)',
      },
    ]);
  });

  it('warns about an input that is declared but not required, stores the warning and returns it on every read', async () => {
    const def = {
      id: 'greet',
      inputs: typed,
      steps: [{ id: 'hello', plugin: 'noop', with: { output: { who: '${{ inputs.name }}', n: '${{ inputs.n }}' } } }],
    };
    const warning = {
      code: 'INPUT_NOT_REQUIRED',
      stepId: 'hello',
      path: 'steps.0.with.output.who',
      message: expect.stringMatching(/^template reads inputs\.name, .* fails with TEMPLATE_UNRESOLVED/),
    };
    const first = await publish(def);
    expect(first.status).toBe(201);
    expect(first.body.warnings).toEqual([warning]);
    const again = await publish(def);
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ ...first.body, created: false });
    const latest = await app.request('GET', '/api/v1/dags/greet', { as });
    expect(latest.body.warnings).toEqual([warning]);
    const v1 = await app.request('GET', `/api/v1/dags/greet/versions/${first.body.version}`, { as });
    expect(v1.body.warnings).toEqual([warning]);
    const disabled = await app.request('POST', `/api/v1/dags/greet/versions/${first.body.version}/disable`, { as });
    expect(disabled.body.warnings).toEqual([warning]);

    const b = await app.tenant('tenant-b-checks', ['orchestrator:admin']);
    const other = await app.request('GET', `/api/v1/dags/greet/versions/${first.body.version}`, {
      as: { token: b.token, tenantId: b.tenantId },
    });
    expect(other.status).toBe(404);

    const fixed = await publish({ ...def, inputs: { ...typed, required: ['n', 'name'] } });
    expect(fixed.status).toBe(201);
    expect(fixed.body.warnings).toEqual([]);
  });

  it('checks a YAML definition the same way', async () => {
    const r = await app.request('POST', '/api/v1/dags', {
      as,
      rawBody: [
        'id: yaml-checks',
        'inputs:',
        '  type: object',
        '  properties: { n: { type: integer } }',
        '  required: [n]',
        'steps:',
        '  - id: make',
        '    plugin: cli',
        "    with: { command: echo, args: ['${{ inputs.n }}'] }",
        '',
      ].join('\n'),
      headers: { 'content-type': 'application/yaml' },
    });
    expect(r.status).toBe(400);
    expect(r.body.error.details.issues[0]).toMatchObject({
      path: 'steps.0.with.args.0',
      code: 'TEMPLATE_TYPE_MISMATCH',
    });
  });

  it('keeps a stored version’s warnings immutable, even for the owner', async () => {
    const owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
    try {
      await expect(owner.query(`update dag_version set warnings = '[]'::jsonb where dag_id = 'greet'`)).rejects.toThrow(
        /immutable/,
      );
    } finally {
      await owner.end();
    }
  });
});
