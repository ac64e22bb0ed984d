import { Injectable, type OnApplicationBootstrap } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { RequestMethod } from '@nestjs/common';
import { z } from 'zod';
import { errorEnvelopeSchema } from '../errors/error-envelope';
import { ROUTE_SPEC, type RouteSpec } from './route-spec';

export interface RouteEntry {
  method: string;
  /** OpenAPI path template, e.g. /api/v1/runs/{runId}. */
  path: string;
  spec: RouteSpec;
}

type JsonSchema = Record<string, unknown>;

/**
 * Enumerates the application's routes from Nest's own metadata, with their RouteSpec. Reads them
 * once at bootstrap, so a route without a `@Route` spec stops the application from starting.
 */
@Injectable()
export class RouteTable implements OnApplicationBootstrap {
  private cached?: RouteEntry[];

  onApplicationBootstrap(): void {
    this.routes();
  }

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
  ) {}

  routes(): RouteEntry[] {
    if (this.cached) return this.cached;
    const out: RouteEntry[] = [];
    for (const wrapper of this.discovery.getControllers()) {
      const instance = wrapper.instance as Record<string, unknown> | undefined;
      if (!instance || !wrapper.metatype) continue;
      const base = normalize(this.reflector.get<string | string[]>(PATH_METADATA, wrapper.metatype) ?? '');
      const proto = Object.getPrototypeOf(instance) as object;
      for (const name of this.scanner.getAllMethodNames(proto)) {
        const handler = (proto as Record<string, unknown>)[name] as (...a: unknown[]) => unknown;
        const sub = this.reflector.get<string | string[] | undefined>(PATH_METADATA, handler);
        const method = this.reflector.get<RequestMethod | undefined>(METHOD_METADATA, handler);
        if (sub === undefined || method === undefined) continue;
        const spec = this.reflector.get<RouteSpec | undefined>(ROUTE_SPEC, handler);
        if (!spec) throw new Error(`route ${wrapper.metatype.name}.${name} has no @Route spec`);
        const full = [base, normalize(Array.isArray(sub) ? sub[0] : sub)].filter(Boolean).join('/');
        out.push({
          method: RequestMethod[method].toLowerCase(),
          path: '/' + full.replace(/:([A-Za-z0-9_]+)/g, '{$1}'),
          spec,
        });
      }
    }
    this.cached = out.sort((a, b) =>
      a.path === b.path ? a.method.localeCompare(b.method) : a.path.localeCompare(b.path),
    );
    return this.cached;
  }
}

function normalize(p: string | string[]): string {
  return (Array.isArray(p) ? p[0] : p).replace(/^\/+|\/+$/g, '');
}

/** Builds the OpenAPI 3.1 document from the same zod schemas that validate each route's input. */
export function buildOpenApi(routes: RouteEntry[], info: { title: string; version: string }): JsonSchema {
  const components: Record<string, JsonSchema> = {};
  // Schemas with a meta id come back as local `$defs`; they move to components.schemas and every
  // `#/$defs/X` becomes `#/components/schemas/X`, so references resolve within the whole document.
  const toSchema = (s: z.ZodType, io: 'input' | 'output'): JsonSchema => {
    const json = z.toJSONSchema(s, {
      target: 'draft-2020-12',
      io,
      unrepresentable: 'any',
      reused: 'inline',
    }) as JsonSchema;
    delete json.$schema;
    const defs = json.$defs as Record<string, JsonSchema> | undefined;
    delete json.$defs;
    for (const [name, def] of Object.entries(defs ?? {})) components[name] ??= rewriteRefs(def) as JsonSchema;
    return rewriteRefs(json) as JsonSchema;
  };
  // The envelope has a meta id, so toSchema files its definition under components.schemas.ErrorEnvelope
  // and answers with a reference to it; the reference itself is not a definition.
  toSchema(errorEnvelopeSchema, 'output');
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const s = r.spec;
    const parameters: unknown[] = [];
    for (const [where, obj] of [
      ['path', s.params],
      ['query', s.query],
    ] as const) {
      if (!obj) continue;
      const js = toSchema(obj, 'input') as { properties?: Record<string, JsonSchema>; required?: string[] };
      for (const [name, schema] of Object.entries(js.properties ?? {})) {
        parameters.push({
          name,
          in: where,
          required: where === 'path' || (js.required ?? []).includes(name),
          schema,
          ...(typeof schema.description === 'string' ? { description: schema.description } : {}),
        });
      }
    }
    if (s.access !== 'public' && s.access !== 'platform:admin') {
      // A console session carries its tenant: only a bearer token needs the header.
      parameters.push({
        name: 'X-Tenant-Id',
        in: 'header',
        required: false,
        schema: { type: 'string' },
        description:
          "the token's tenant: required with a bearer token; with the console's session cookie it may be left out (when sent, it must be the session's tenant)",
      });
    }
    if (r.method === 'post' && s.idempotent !== false && s.access !== 'public' && s.access !== 'platform:admin') {
      parameters.push({
        name: 'Idempotency-Key',
        in: 'header',
        required: false,
        schema: { type: 'string', maxLength: 255 },
      });
    }
    const responses: Record<string, unknown> = {};
    for (const [code, resp] of Object.entries(s.responses)) {
      const content: Record<string, unknown> = {};
      if (resp.schema) content[resp.contentType ?? 'application/json'] = { schema: toSchema(resp.schema, 'output') };
      else if (resp.contentType) content[resp.contentType] = {};
      // Sequential media types (OpenAPI 3.2 itemSchema, written as x-oai-itemSchema before 3.2): the
      // body reads as an array of items, one at a time.
      for (const [type, item] of Object.entries(resp.sequences ?? {})) {
        const itemSchema = toSchema(item, 'output');
        content[type] = { schema: { type: 'array', items: itemSchema }, 'x-oai-itemSchema': itemSchema };
      }
      responses[code] = { description: resp.description, ...(Object.keys(content).length > 0 ? { content } : {}) };
    }
    responses.default = {
      description: 'Error (see code)',
      content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
    };
    const op: Record<string, unknown> = {
      operationId: s.operationId,
      summary: s.summary,
      tags: s.tags,
      'x-ordo-access': s.access,
      // Worker routes take only a worker's bearer token; the others also the console's session
      // cookie (with its CSRF token on state-changing requests, docs/security.md).
      security:
        s.access === 'public' ? [] : s.access === 'worker' ? [{ bearer: [] }] : [{ bearer: [] }, { session: [] }],
      parameters,
      responses,
    };
    if (s.body) {
      const schema = toSchema(s.body, 'input');
      const content: Record<string, unknown> = { 'application/json': { schema } };
      for (const ct of s.bodyContentTypes ?? []) content[ct] = { schema: ct.includes('yaml') ? schema : {} };
      op.requestBody = { required: true, content };
    }
    (paths[r.path] ??= {})[r.method] = op;
  }
  return {
    openapi: '3.1.0',
    info,
    paths,
    components: {
      schemas: components,
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        session: {
          type: 'apiKey',
          in: 'cookie',
          name: 'ordo_session',
          description: 'the console session (POST /api/v1/session); state-changing requests also send X-CSRF-Token',
        },
      },
    },
  };
}

function rewriteRefs(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(rewriteRefs);
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    out[k] =
      k === '$ref' && typeof x === 'string' ? x.replace(/^#\/\$defs\//, '#/components/schemas/') : rewriteRefs(x);
  }
  return out;
}
