import { startTestApp, type TestApp } from '../support/test-app';
import { yamlNewlineHint } from '../../src/core/http/content-types';

const YAML_DAG = `id: hello
steps:
  - id: greet
    plugin: noop
    with:
      output: { greeting: hi }
`;

describe('request body content types', () => {
  let app: TestApp;
  const as = () => ({ token: app.adminToken, tenantId: app.tenantId });
  const post = (url: string, body: string, contentType?: string) =>
    app.request('POST', url, {
      as: as(),
      rawBody: body,
      headers: contentType === undefined ? {} : { 'content-type': contentType },
    });

  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app?.close());

  it('answers curl -d (a form content type) with a 415 that lists the accepted types and says what curl did', async () => {
    const r = await post('/api/v1/dags', YAML_DAG.replace(/\n/g, ''), 'application/x-www-form-urlencoded');
    expect(r.status).toBe(415);
    expect(r.body.error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    const m = r.body.error.message as string;
    expect(m).toContain('content type application/x-www-form-urlencoded is not accepted');
    for (const t of ['application/json', 'application/yaml', 'application/x-yaml', 'text/yaml']) expect(m).toContain(t);
    expect(m).toMatch(/curl -d sends application\/x-www-form-urlencoded; add -H 'Content-Type: application\/json'/);
  });

  it("lists the route's own types in its 415: JSON and YAML for a DAG, JSON alone for a token", async () => {
    const dag = await post('/api/v1/dags', YAML_DAG, 'text/plain');
    expect(dag.status).toBe(415);
    expect(dag.body.error.message).toBe(
      'content type text/plain is not accepted by this route; accepted: application/json, application/yaml, application/x-yaml, text/yaml',
    );
    const token = await post('/api/v1/tokens', 'scopes: [orchestrator:read]\n', 'application/yaml');
    expect(token.status).toBe(415);
    expect(token.body.error.message).toBe(
      'content type application/yaml is not accepted by this route; accepted: application/json',
    );
  });

  it('publishes the YAML document sent with its newlines (curl --data-binary)', async () => {
    const r = await post('/api/v1/dags', YAML_DAG, 'application/yaml');
    expect(r.status).toBe(201);
  });

  it('hints at curl -d when a YAML body that fails to parse is one line reading like several', async () => {
    const flat = await post('/api/v1/dags', YAML_DAG.replace(/\n/g, ' '), 'application/yaml');
    expect(flat.status).toBe(400);
    expect(flat.body.error.code).toBe('YAML_INVALID');
    expect(flat.body.error.message).toMatch(
      /^YAML line 1: .*\(the body is a single line but reads like a YAML document/,
    );
    expect(flat.body.error.message).toContain('curl -d strips them; send the file with curl --data-binary @file.yaml');

    // A multi-line document that is malformed gets the parser's message alone.
    const broken = await post('/api/v1/dags', 'id: x\nsteps: [\n', 'application/yaml');
    expect(broken.status).toBe(400);
    expect(broken.body.error.code).toBe('YAML_INVALID');
    expect(broken.body.error.message).not.toContain('curl');
  });

  it('keeps the hint for one-line bodies that look like documents', () => {
    expect(yamlNewlineHint('id: a steps: - id: b plugin: noop')).toBeDefined();
    expect(yamlNewlineHint('id: a\nsteps: []')).toBeUndefined();
    expect(yamlNewlineHint('just a scalar')).toBeUndefined();
    expect(yamlNewlineHint('{"id": "a"}')).toBeUndefined();
  });
});
