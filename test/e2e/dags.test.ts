import { execFileSync } from 'node:child_process';
import { sql } from 'kysely';
import { startTestApp, type TestApp } from '../support/test-app';
import { DOT, itWithTool } from '../support/tools';

const itWithDot = itWithTool(DOT, 'DOT rendering by Graphviz');

function chain(id: string, note = 'v'): Record<string, unknown> {
  return {
    id,
    description: note,
    steps: [
      { id: 'fetch', plugin: 'noop', with: { output: { body: [1, 2] } } },
      {
        id: 'parse',
        plugin: 'noop',
        dependsOn: ['fetch'],
        with: { output: { items: '${{ steps.fetch.outputs.body }}' } },
      },
      { id: 'audit', plugin: 'noop', timeout: '5s', retry: { maxRetries: 2, initialDelay: '1s' } },
      { id: 'store', plugin: 'noop', dependsOn: ['parse', 'audit'] },
    ],
  };
}

describe('DAG publishing', () => {
  let app: TestApp;
  let admin: { token: string; tenantId: string };
  let reader: { token: string; tenantId: string };

  const counts = async () => {
    const r = await sql<{ dags: number; versions: number }>`
      select (select count(*) from dag)::int as dags, (select count(*) from dag_version)::int as versions`.execute(
      app.testDb.db.system,
    );
    return r.rows[0];
  };
  const publish = (body: unknown, as = admin) => app.request('POST', '/api/v1/dags', { as, body });
  const publishYaml = (text: string, as = admin) =>
    app.request('POST', '/api/v1/dags', { as, rawBody: text, headers: { 'content-type': 'application/yaml' } });

  beforeAll(async () => {
    app = await startTestApp();
    admin = { token: app.adminToken, tenantId: app.tenantId };
    reader = { token: await app.token(app.tenantId, ['orchestrator:read']), tenantId: app.tenantId };
  });
  afterAll(async () => app.close());

  it('publishes a JSON definition as version 1 and returns the same version for identical content', async () => {
    const first = await publish(chain('etl'));
    expect(first.status).toBe(201);
    expect(first.body).toEqual({
      dagId: 'etl',
      version: 1,
      contentHash: expect.stringMatching(/^[0-9a-f]{64}$/),
      status: 'active',
      created: true,
      warnings: [],
    });
    const again = await publish(chain('etl'));
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ ...first.body, created: false });
    const changed = await publish(chain('etl', 'second'));
    expect(changed.status).toBe(201);
    expect(changed.body.version).toBe(2);
    expect(changed.body.contentHash).not.toBe(first.body.contentHash);
  });

  it('treats a YAML publish of the same content as identical, and stores new YAML content as yaml', async () => {
    const yaml = [
      'id: etl',
      'description: v',
      'steps:',
      '  - id: fetch',
      '    plugin: noop',
      '    with: { output: { body: [1, 2] } }',
      '  - id: parse',
      '    plugin: noop',
      '    dependsOn: [fetch]',
      "    with: { output: { items: '${{ steps.fetch.outputs.body }}' } }",
      '  - id: audit',
      '    plugin: noop',
      '    timeout: 5000',
      '    retry: { maxRetries: 2, initialDelay: 1000 }',
      '  - id: store',
      '    plugin: noop',
      '    dependsOn: [audit, parse]',
    ].join('\n');
    const same = await publishYaml(yaml);
    expect(same.status).toBe(200);
    expect(same.body).toMatchObject({ dagId: 'etl', version: 1, created: false });
    const fresh = await publishYaml('id: yaml-dag\nsteps:\n  - id: only\n    plugin: noop\n');
    expect(fresh.status).toBe(201);
    const got = await app.request('GET', '/api/v1/dags/yaml-dag/versions/1', { as: reader });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({
      sourceFormat: 'yaml',
      definition: { id: 'yaml-dag', steps: [{ id: 'only', timeout: 300000 }] },
    });
  });

  describe('rejections', () => {
    const cases: Array<[string, unknown, RegExp, string | undefined]> = [
      [
        'a dependency on an unknown step',
        { id: 'bad', steps: [{ id: 'a', plugin: 'noop', dependsOn: ['ghost'] }] },
        /unknown step "ghost"/,
        'a',
      ],
      [
        'a cycle, naming it',
        {
          id: 'bad',
          steps: [
            { id: 'a', plugin: 'noop', dependsOn: ['c'] },
            { id: 'b', plugin: 'noop', dependsOn: ['a'] },
            { id: 'c', plugin: 'noop', dependsOn: ['b'] },
          ],
        },
        /a → c → b → a/,
        'a',
      ],
      [
        'a self-dependency',
        { id: 'bad', steps: [{ id: 'a', plugin: 'noop', dependsOn: ['a'] }] },
        /depends on itself/,
        'a',
      ],
      [
        'a duplicate step id',
        {
          id: 'bad',
          steps: [
            { id: 'a', plugin: 'noop' },
            { id: 'a', plugin: 'noop' },
          ],
        },
        /duplicate step id "a"/,
        'a',
      ],
      ['an unknown plugin', { id: 'bad', steps: [{ id: 'x', plugin: 'teleport' }] }, /unknown plugin "teleport"/, 'x'],
      [
        'plugin config not matching its schema',
        { id: 'bad', steps: [{ id: 'x', plugin: 'noop', with: { sleepMs: -5 } }] },
        /noop config/,
        'x',
      ],
      [
        'an unknown plugin config field',
        { id: 'bad', steps: [{ id: 'x', plugin: 'noop', with: { colour: 'red' } }] },
        /noop config/,
        'x',
      ],
      ['a bad timeout', { id: 'bad', steps: [{ id: 'x', plugin: 'noop', timeout: '3 weeks' }] }, /duration/, 'x'],
      ['a timeout over 7 days', { id: 'bad', steps: [{ id: 'x', plugin: 'noop', timeout: '8d' }] }, /7 days/, 'x'],
      ['a bad retry', { id: 'bad', steps: [{ id: 'x', plugin: 'noop', retry: { maxRetries: 1000 } }] }, /100/, 'x'],
      ['a concurrency of 0', { id: 'bad', steps: [{ id: 'x', plugin: 'noop', concurrency: 0 }] }, /concurrency/, 'x'],
      [
        'a concurrency that is not a number',
        { id: 'bad', steps: [{ id: 'x', plugin: 'noop', concurrency: '2' }] },
        /concurrency/,
        'x',
      ],
      [
        'a retry whose initial delay exceeds its max delay',
        {
          id: 'bad',
          steps: [{ id: 'x', plugin: 'noop', retry: { maxRetries: 1, initialDelay: '1h', maxDelay: '1m' } }],
        },
        /initialDelay exceeds maxDelay/,
        'x',
      ],
      [
        'a template referencing a step that is not upstream',
        {
          id: 'bad',
          steps: [
            { id: 'a', plugin: 'noop' },
            { id: 'b', plugin: 'noop', with: { output: { v: '${{ steps.a.outputs.v }}' } } },
          ],
        },
        /not upstream of "b"/,
        'b',
      ],
      [
        'a template referencing an unknown step',
        { id: 'bad', steps: [{ id: 'a', plugin: 'noop', with: { fail: '${{ steps.zz.outputs.f }}' } }] },
        /unknown step "zz"/,
        'a',
      ],
      [
        'an inputs value that is not a JSON Schema',
        { id: 'bad', inputs: { type: 'object', required: 'a' }, steps: [{ id: 'a', plugin: 'noop' }] },
        /inputs schema/,
        undefined,
      ],
      [
        'an unknown top-level field',
        { id: 'bad', owner: 'me', steps: [{ id: 'a', plugin: 'noop' }] },
        /owner/,
        undefined,
      ],
      ['no steps', { id: 'bad', steps: [] }, /steps/, undefined],
    ];

    it.each(cases)(
      'rejects %s with 400 DAG_INVALID naming the step, writing nothing',
      async (_name, body, message, step) => {
        const before = await counts();
        const r = await publish(body);
        expect(r.status).toBe(400);
        expect(r.body.error.code).toBe('DAG_INVALID');
        expect(r.body.error.message).toMatch(message);
        if (step !== undefined) {
          expect(r.body.error.message).toContain(`step "${step}"`);
          expect(r.body.error.details.issues[0].step).toBe(step);
        }
        expect(r.body.error.details.issues[0].path).toEqual(expect.any(String));
        expect(await counts()).toEqual(before);
      },
    );

    it('accepts a template where the plugin expects a non-string', async () => {
      const r = await publish({
        id: 'templated',
        inputs: { type: 'object', properties: { ms: { type: 'integer' }, r: { type: 'boolean' } } },
        steps: [
          { id: 'a', plugin: 'noop', with: { sleepMs: '${{ inputs.ms }}', retryable: '${{ inputs.r }}' } },
          { id: 'b', plugin: 'noop', dependsOn: ['a'], with: { retryable: '${{ steps.a.outputs.r }}' } },
        ],
      });
      expect(r.status).toBe(201);
    });

    it('rejects YAML with duplicate keys, custom tags or alias bombs with 400 YAML_INVALID, writing nothing', async () => {
      const before = await counts();
      for (const text of [
        'id: y1\nid: y2\nsteps: []',
        'id: y1\nsteps:\n  - id: a\n    plugin: !!js/function "x"',
        'a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]',
        'id: [unclosed',
      ]) {
        const r = await publishYaml(text);
        expect(r.status).toBe(400);
        expect(r.body.error.code).toBe('YAML_INVALID');
      }
      expect(await counts()).toEqual(before);
    });

    it('rejects a JSON body that is not an object', async () => {
      const r = await publish([chain('x')]);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('VALIDATION_FAILED');
    });

    it('rejects publishing with a read-only token with 403', async () => {
      const before = await counts();
      const r = await publish(chain('forbidden'), reader);
      expect(r.status).toBe(403);
      expect(await counts()).toEqual(before);
    });
  });

  it('gives concurrent publishes of different content consecutive versions and of equal content one version', async () => {
    const different = await Promise.all([...Array(6).keys()].map((i) => publish(chain('race', `n${i}`))));
    expect(different.map((r) => r.status)).toEqual(Array(6).fill(201));
    expect(different.map((r) => r.body.version as number).sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6]);
    const same = await Promise.all([...Array(6).keys()].map(() => publish(chain('race-same'))));
    expect(new Set(same.map((r) => r.body.version))).toEqual(new Set([1]));
    expect(same.filter((r) => r.status === 201)).toHaveLength(1);
    expect(same.filter((r) => r.status === 200)).toHaveLength(5);
  });

  it('returns a version with its definition and metadata, and the latest active version', async () => {
    const v1 = await app.request('GET', '/api/v1/dags/etl/versions/1', { as: reader });
    expect(v1.status).toBe(200);
    expect(v1.body).toMatchObject({
      dagId: 'etl',
      version: 1,
      status: 'active',
      sourceFormat: 'json',
      owner: expect.any(String),
      signature: null,
      bundleHash: null,
      disabledAt: null,
      statusHistory: [],
    });
    expect(v1.body.definition.steps.find((s: { id: string }) => s.id === 'audit')).toMatchObject({
      timeout: 5000,
      retry: { maxRetries: 2, initialDelay: 1000, multiplier: 2, maxDelay: 300000 },
    });
    const latest = await app.request('GET', '/api/v1/dags/etl', { as: reader });
    expect(latest.body.version).toBe(2);
    expect((await app.request('GET', '/api/v1/dags/etl/versions/99', { as: reader })).status).toBe(404);
    expect((await app.request('GET', '/api/v1/dags/nope', { as: reader })).status).toBe(404);
    expect((await app.request('GET', '/api/v1/dags/etl/versions/zero', { as: reader })).status).toBe(400);
  });

  it('disables and re-enables a version idempotently, recording who and when', async () => {
    const d1 = await app.request('POST', '/api/v1/dags/etl/versions/2/disable', { as: admin });
    expect(d1.status).toBe(200);
    expect(d1.body).toMatchObject({ status: 'disabled', disabledAt: expect.any(String) });
    const d2 = await app.request('POST', '/api/v1/dags/etl/versions/2/disable', { as: admin });
    expect(d2.status).toBe(200);
    expect(d2.body.disabledAt).toBe(d1.body.disabledAt);
    expect(d2.body.statusHistory).toHaveLength(1);
    expect((await app.request('GET', '/api/v1/dags/etl', { as: reader })).body.version).toBe(1);
    expect((await app.request('POST', '/api/v1/dags/etl/versions/2/disable', { as: reader })).status).toBe(403);
    const e1 = await app.request('POST', '/api/v1/dags/etl/versions/2/enable', { as: admin });
    expect(e1.body).toMatchObject({ status: 'active', disabledAt: null });
    const e2 = await app.request('POST', '/api/v1/dags/etl/versions/2/enable', { as: admin });
    expect(e2.body.statusHistory).toEqual([
      { status: 'disabled', actor: expect.any(String), changedAt: expect.any(String) },
      { status: 'active', actor: expect.any(String), changedAt: expect.any(String) },
    ]);
    expect(Date.parse(e2.body.statusHistory[1].changedAt)).toBeGreaterThanOrEqual(
      Date.parse(e2.body.statusHistory[0].changedAt),
    );
    expect((await app.request('GET', '/api/v1/dags/etl', { as: reader })).body.version).toBe(2);
    expect((await app.request('POST', '/api/v1/dags/etl/versions/77/disable', { as: admin })).status).toBe(404);
  });

  it('lists versions dagId ascending, version descending, across keyset pages and with a status filter', async () => {
    const all = await app.request('GET', '/api/v1/dags?limit=500', { as: reader });
    const keys = (all.body.items as Array<{ dagId: string; version: number }>).map((i) => `${i.dagId}@${i.version}`);
    const sorted = [...(all.body.items as Array<{ dagId: string; version: number }>)]
      .sort((a, b) => (a.dagId < b.dagId ? -1 : a.dagId > b.dagId ? 1 : b.version - a.version))
      .map((i) => `${i.dagId}@${i.version}`);
    expect(keys).toEqual(sorted);
    expect(keys.slice(0, 3)).toEqual(['etl@2', 'etl@1', 'race@6']);
    expect(all.body.nextPageToken).toBeNull();

    const paged: string[] = [];
    let token: string | null = null;
    let pages = 0;
    do {
      const r = await app.request('GET', `/api/v1/dags?limit=3${token ? `&pageToken=${token}` : ''}`, { as: reader });
      expect(r.status).toBe(200);
      expect(r.body.items.length).toBeLessThanOrEqual(3);
      paged.push(...(r.body.items as Array<{ dagId: string; version: number }>).map((i) => `${i.dagId}@${i.version}`));
      token = r.body.nextPageToken as string | null;
      pages++;
    } while (token !== null && pages < 50);
    expect(paged).toEqual(keys);
    expect(pages).toBe(Math.ceil(keys.length / 3));

    await app.request('POST', '/api/v1/dags/race/versions/3/disable', { as: admin });
    const disabled = await app.request('GET', '/api/v1/dags?status=disabled', { as: reader });
    expect(disabled.body.items.map((i: { dagId: string; version: number }) => `${i.dagId}@${i.version}`)).toEqual([
      'race@3',
    ]);
    const one = await app.request('GET', '/api/v1/dags?dagId=race&status=active&limit=2', { as: reader });
    expect(one.body.items.map((i: { version: number }) => i.version)).toEqual([6, 5]);
    expect((await app.request('GET', '/api/v1/dags?pageToken=garbage', { as: reader })).body.error.code).toBe(
      'INVALID_PAGE_TOKEN',
    );
    expect((await app.request('GET', '/api/v1/dags?status=gone', { as: reader })).status).toBe(400);
  });

  it('returns the graph as JSON with the deterministic order, and as DOT', async () => {
    const j = await app.request('GET', '/api/v1/dags/etl/versions/1/graph?format=json', { as: reader });
    expect(j.status).toBe(200);
    expect(j.body.order).toEqual(['audit', 'fetch', 'parse', 'store']);
    expect(j.body.edges).toEqual([
      { from: 'audit', to: 'store' },
      { from: 'fetch', to: 'parse' },
      { from: 'parse', to: 'store' },
    ]);
    expect(j.body.nodes).toHaveLength(4);
    const d = await app.request('GET', '/api/v1/dags/etl/versions/1/graph?format=dot', { as: reader });
    expect(d.status).toBe(200);
    expect(d.headers.get('content-type')).toMatch(/^text\/vnd\.graphviz/);
    expect(d.text).toContain('"fetch" -> "parse";');
    expect((await app.request('GET', '/api/v1/dags/etl/versions/1/graph?format=png', { as: reader })).status).toBe(400);
  });

  itWithDot('serves DOT that Graphviz renders', async () => {
    const d = await app.request('GET', '/api/v1/dags/etl/versions/1/graph?format=dot', { as: reader });
    const svg = execFileSync('dot', ['-Tsvg'], { input: d.text, timeout: 10_000 }).toString();
    expect(svg).toContain('<svg');
    expect(svg).toContain('parse');
  });

  it('returns the existing disabled version for identical content, and 404 for the latest when none is active', async () => {
    expect((await publish(chain('solo'))).status).toBe(201);
    await app.request('POST', '/api/v1/dags/solo/versions/1/disable', { as: admin });
    const again = await publish(chain('solo'));
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ version: 1, status: 'disabled', created: false });
    const latest = await app.request('GET', '/api/v1/dags/solo', { as: reader });
    expect(latest.status).toBe(404);
    expect(latest.body.error.code).toBe('DAG_NOT_FOUND');
  });

  it('replays a publish sent again with the same Idempotency-Key', async () => {
    const headers = { 'idempotency-key': 'publish-once' };
    const first = await app.request('POST', '/api/v1/dags', { as: admin, body: chain('idem'), headers });
    const replay = await app.request('POST', '/api/v1/dags', { as: admin, body: chain('idem'), headers });
    expect(first.status).toBe(201);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);
    const reused = await app.request('POST', '/api/v1/dags', { as: admin, body: chain('idem', 'other'), headers });
    expect(reused.status).toBe(422);
  });

  it('documents the publish route with JSON and YAML bodies in OpenAPI', async () => {
    const doc = await app.request('GET', '/api/v1/openapi.json');
    const op = doc.body.paths['/api/v1/dags'].post;
    expect(Object.keys(op.requestBody.content)).toEqual(['application/json', 'application/yaml']);
    const schema = op.requestBody.content['application/json'].schema;
    expect(schema.properties.steps.type).toBe('array');
    expect(JSON.stringify(schema)).not.toContain('$ref');
    expect(op.responses['201']).toBeDefined();
    expect(op.responses['200']).toBeDefined();
  });

  describe('tenant isolation', () => {
    let b: { token: string; tenantId: string };
    beforeAll(async () => {
      b = await app.tenant('tenant-b');
    });

    it('tenant B cannot read, list, graph, disable or enable tenant A DAGs (404)', async () => {
      for (const [method, url] of [
        ['GET', '/api/v1/dags/etl'],
        ['GET', '/api/v1/dags/etl/versions/1'],
        ['GET', '/api/v1/dags/etl/versions/1/graph'],
        ['GET', '/api/v1/dags/etl/versions/1/graph?format=dot'],
        ['POST', '/api/v1/dags/etl/versions/1/disable'],
        ['POST', '/api/v1/dags/etl/versions/1/enable'],
      ] as const) {
        const r = await app.request(method, url, { as: b });
        expect([method, url, r.status]).toEqual([method, url, 404]);
        expect(r.body.error.code).toBe('DAG_NOT_FOUND');
      }
      expect((await app.request('GET', '/api/v1/dags', { as: b })).body.items).toEqual([]);
      const a = await app.request('GET', '/api/v1/dags/etl/versions/1', { as: reader });
      expect(a.body.status).toBe('active');
    });

    it('tenant B publishes its own DAG with the same dagId independently', async () => {
      const r = await publish(chain('etl'), b);
      expect(r.status).toBe(201);
      expect(r.body.version).toBe(1);
      const again = await publish(chain('etl', 'b-two'), b);
      expect(again.body.version).toBe(2);
      expect((await app.request('GET', '/api/v1/dags/etl', { as: reader })).body.version).toBe(2);
      const list = await app.request('GET', '/api/v1/dags', { as: b });
      expect(list.body.items.map((i: { dagId: string; version: number }) => `${i.dagId}@${i.version}`)).toEqual([
        'etl@2',
        'etl@1',
      ]);
    });

    it('rejects tenant A token with tenant B header (403)', async () => {
      const r = await app.request('GET', '/api/v1/dags', { as: { token: app.adminToken, tenantId: b.tenantId } });
      expect(r.status).toBe(403);
    });
  });
});
