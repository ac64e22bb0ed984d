import { Controller, Get, Module } from '@nestjs/common';
import { ConfigModule } from '../../src/core/config/config.module';
import { DatabaseModule } from '../../src/core/database/database.module';
import { createHttpApp } from '../../src/core/http/app-factory';
import { HttpModule } from '../../src/core/http/http.module';
import { RouteTable } from '../../src/core/http/openapi';
import { createTestDatabase } from '../support/test-database';
import { startTestApp, type TestApp } from '../support/test-app';

interface Operation {
  operationId: string;
  requestBody?: { content: Record<string, { schema: Record<string, unknown> }> };
  parameters: { name: string; in: string }[];
  responses: Record<string, unknown>;
  'x-ordo-access': string;
}

describe('OpenAPI document', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app.close());

  it('lists exactly the routes of the application, each with a unique operationId', async () => {
    const r = await app.request('GET', '/api/v1/openapi.json');
    expect(r.status).toBe(200);
    expect(r.body.openapi).toBe('3.1.0');
    const paths = r.body.paths as Record<string, Record<string, Operation>>;
    const documented = Object.entries(paths).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m} ${p}`));
    const routes = app.ordo.app.get(RouteTable).routes();
    expect(new Set(documented)).toEqual(new Set(routes.map((x) => `${x.method} ${x.path}`)));
    expect(documented.length).toBe(routes.length);
    const ids = Object.values(paths).flatMap((ops) => Object.values(ops).map((o) => o.operationId));
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of [
      '/healthz',
      '/readyz',
      '/api/v1/openapi.json',
      '/api/v1/tokens',
      '/api/v1/tenants',
      '/api/v1/tokens/{jti}/revoke',
    ]) {
      expect(paths[p]).toBeDefined();
    }
  });

  it('documents the request schema of every route that takes a body, and errors as the envelope', async () => {
    const r = await app.request('GET', '/api/v1/openapi.json');
    const paths = r.body.paths as Record<string, Record<string, Operation>>;
    for (const route of app.ordo.app.get(RouteTable).routes()) {
      const op = paths[route.path][route.method];
      expect(op['x-ordo-access']).toBe(route.spec.access);
      expect(op.responses.default).toBeDefined();
      if (route.spec.body) {
        expect(op.requestBody?.content['application/json'].schema).toEqual(expect.objectContaining({}));
      } else {
        expect(op.requestBody).toBeUndefined();
      }
    }
    const resolve = (schema: Record<string, unknown>) =>
      typeof schema.$ref === 'string'
        ? (r.body.components.schemas[schema.$ref.replace('#/components/schemas/', '')] as Record<string, unknown>)
        : schema;
    const create = resolve(paths['/api/v1/tokens'].post.requestBody!.content['application/json'].schema) as {
      properties: Record<string, unknown>;
      required: string[];
      additionalProperties: boolean;
    };
    expect(Object.keys(create.properties).sort()).toEqual(['description', 'pool', 'scopes', 'subject', 'ttlSeconds']);
    expect(create.required).toEqual(['scopes']);
    expect(create.additionalProperties).toBe(false);
    expect(paths['/api/v1/tokens'].get.parameters.map((p) => p.name)).toEqual(
      expect.arrayContaining(['limit', 'pageToken', 'X-Tenant-Id']),
    );
    expect(r.body.components.schemas.ErrorEnvelope).toBeDefined();
  });

  it('has only references that resolve within the document', async () => {
    const r = await app.request('GET', '/api/v1/openapi.json');
    const refs = [...r.text.matchAll(/"\$ref":"([^"]+)"/g)].map((m) => m[1]);
    expect(refs.length).toBeGreaterThan(0);
    for (const ref of new Set(refs)) {
      const target = ref
        .replace(/^#\//, '')
        .split('/')
        .reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], r.body);
      expect({ ref, found: target !== undefined }).toEqual({ ref, found: true });
    }
  });
});

describe('route specs', () => {
  it('refuses to start an application with a route that has no @Route spec', async () => {
    @Controller('bad')
    class UndocumentedController {
      @Get()
      get() {
        return {};
      }
    }
    @Module({ imports: [HttpModule], controllers: [UndocumentedController] })
    class BadModule {}
    const testDb = await createTestDatabase();
    try {
      const root = {
        module: BadModule,
        imports: [ConfigModule.forRoot({} as never), DatabaseModule.forRoot(testDb.db)],
      };
      const http = await createHttpApp(root, { bodyLimit: 1024 * 1024, logger: false });
      await expect(http.init()).rejects.toThrow(/UndocumentedController\.get has no @Route spec/);
      await http.close().catch(() => undefined);
    } finally {
      await testDb.drop();
    }
  });
});
