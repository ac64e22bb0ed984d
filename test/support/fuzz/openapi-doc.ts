import type { z } from 'zod';
import { RouteTable, type RouteEntry } from '../../../src/core/http/openapi';
import type { TestApp } from '../test-app';

export type JsonSchema = Record<string, unknown>;

export interface OpenApiParameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required: boolean;
  schema: JsonSchema;
}

export interface OpenApiOperation {
  operationId: string;
  'x-ordo-access': string;
  parameters: OpenApiParameter[];
  requestBody?: { content: Record<string, { schema: JsonSchema }> };
  responses: Record<string, unknown>;
}

export interface OpenApiDocument {
  paths: Record<string, Record<string, OpenApiOperation>>;
  components: { schemas: Record<string, JsonSchema> };
}

/** One operation of the served document, joined with the route spec that produced it. */
export interface Operation {
  method: string;
  path: string;
  /** `GET /api/v1/runs/{runId}`: the name tests use. */
  label: string;
  access: string;
  op: OpenApiOperation;
  pathParams: OpenApiParameter[];
  queryParams: OpenApiParameter[];
  /** The JSON request body schema, when the operation takes a body. */
  bodySchema?: JsonSchema;
  bodyContentTypes: string[];
  route: RouteEntry;
}

export const MUTATING = new Set(['post', 'put', 'patch', 'delete']);

/** Reads /api/v1/openapi.json from the running app and lists every operation in it. */
export async function loadOperations(app: TestApp): Promise<{ doc: OpenApiDocument; operations: Operation[] }> {
  const r = await app.request('GET', '/api/v1/openapi.json');
  if (r.status !== 200) throw new Error(`openapi.json: ${r.status} ${r.text}`);
  const doc = r.body as OpenApiDocument;
  const routes = new Map(
    app.ordo.app
      .get(RouteTable)
      .routes()
      .map((e) => [`${e.method} ${e.path}`, e]),
  );
  const operations: Operation[] = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const route = routes.get(`${method} ${path}`);
      if (!route) throw new Error(`${method} ${path} is documented but not routed`);
      const content = op.requestBody?.content ?? {};
      operations.push({
        method,
        path,
        label: `${method.toUpperCase()} ${path}`,
        access: op['x-ordo-access'],
        op,
        pathParams: op.parameters.filter((p) => p.in === 'path'),
        queryParams: op.parameters.filter((p) => p.in === 'query'),
        bodySchema: content['application/json']?.schema,
        bodyContentTypes: Object.keys(content),
        route,
      });
    }
  }
  return { doc, operations };
}

/** Follows `$ref`s into components.schemas. */
export function deref(schema: JsonSchema, doc: OpenApiDocument): JsonSchema {
  let s = schema;
  for (let i = 0; i < 20 && typeof s.$ref === 'string'; i++) {
    const name = s.$ref.replace('#/components/schemas/', '');
    const target = doc.components.schemas[name];
    if (!target) throw new Error(`unresolved ${s.$ref}`);
    s = target;
  }
  return s;
}

/** The zod schema documented for `status` (2xx), if the route declares a JSON body for it. */
export function responseSchema(op: Operation, status: number): z.ZodType | undefined | null {
  const resp = op.route.spec.responses[status];
  if (!resp) return null;
  return resp.schema;
}

/** Fills an OpenAPI path template; values are percent-encoded (lone surrogates become U+FFFD). */
export function fillPath(template: string, values: Record<string, string>): string {
  return template.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    const v = values[name];
    if (v === undefined) throw new Error(`no value for {${name}} in ${template}`);
    return encodeSegment(v);
  });
}

export function encodeSegment(v: string): string {
  try {
    return encodeURIComponent(v);
  } catch {
    return [...Buffer.from(v, 'utf8')].map((b) => '%' + b.toString(16).padStart(2, '0')).join('');
  }
}

export function queryString(q: Record<string, string | undefined>): string {
  const parts = Object.entries(q)
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => `${encodeSegment(k)}=${encodeSegment(v)}`);
  return parts.length ? `?${parts.join('&')}` : '';
}
