import 'reflect-metadata';
import { RequestMethod, type Type } from '@nestjs/common';
import { METHOD_METADATA, MODULE_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { HttpModule } from '../../../src/core/http/http.module';
import { ROUTE_SPEC, type RouteSpec } from '../../../src/core/http/route-spec';
import { ApiRoleModule } from '../../../src/roles/api/api.module';

/** A route as read from decorator metadata, without booting the application. */
export interface StaticRoute {
  method: string;
  path: string;
  label: string;
  spec: RouteSpec;
}

interface DynamicRef {
  module: Type;
  imports?: unknown[];
  controllers?: Type[];
}
type ModuleRef = Type | DynamicRef | { forwardRef: () => unknown };

/**
 * The routes the api role serves, read synchronously from the same Nest metadata RouteTable reads
 * at bootstrap. Jest needs test names before any test runs, so the generated suites enumerate
 * operations from here, then check in a test that the list equals the served OpenAPI document.
 */
export function staticApiRoutes(roots: Type[] = [HttpModule, ApiRoleModule]): StaticRoute[] {
  const seen = new Set<unknown>();
  const controllers = new Set<Type>();
  const visit = (m: unknown) => {
    if (!m || seen.has(m)) return;
    seen.add(m);
    let ref = m as ModuleRef;
    if (typeof ref === 'object' && 'forwardRef' in ref) ref = ref.forwardRef() as Type | DynamicRef;
    const dynamic: Partial<DynamicRef> = typeof ref === 'function' ? {} : ref;
    const cls = typeof ref === 'function' ? ref : ref.module;
    const meta = (key: string) => (Reflect.getMetadata(key, cls) as unknown[] | undefined) ?? [];
    for (const c of [...meta(MODULE_METADATA.CONTROLLERS), ...(dynamic.controllers ?? [])]) controllers.add(c as Type);
    for (const i of [...meta(MODULE_METADATA.IMPORTS), ...(dynamic.imports ?? [])]) visit(i);
  };
  roots.forEach(visit);
  const out: StaticRoute[] = [];
  const norm = (p: unknown) => String(Array.isArray(p) ? p[0] : (p ?? '')).replace(/^\/+|\/+$/g, '');
  for (const ctrl of controllers) {
    const base = norm(Reflect.getMetadata(PATH_METADATA, ctrl));
    for (const name of Object.getOwnPropertyNames(ctrl.prototype)) {
      const handler = (ctrl.prototype as Record<string, unknown>)[name];
      if (typeof handler !== 'function' || name === 'constructor') continue;
      const sub = Reflect.getMetadata(PATH_METADATA, handler) as string | string[] | undefined;
      const method = Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod | undefined;
      const spec = Reflect.getMetadata(ROUTE_SPEC, handler) as RouteSpec | undefined;
      if (sub === undefined || method === undefined || !spec) continue;
      const full = [base, norm(sub)].filter(Boolean).join('/');
      const path = '/' + full.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
      const m = RequestMethod[method].toLowerCase();
      out.push({ method: m, path, label: `${m.toUpperCase()} ${path}`, spec });
    }
  }
  return out.sort((a, b) => (a.path === b.path ? a.method.localeCompare(b.method) : a.path.localeCompare(b.path)));
}
