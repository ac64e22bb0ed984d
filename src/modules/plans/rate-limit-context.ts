import { AsyncLocalStorage } from 'node:async_hooks';
import type { FastifyRequest } from 'fastify';
import type { CheckedLimit } from './rate-limit-fields';

/** The limits the request guard checked, per request. */
const checkedByGuard = new WeakMap<FastifyRequest, CheckedLimit[]>();
/** The limits checked while a request is served (the guard's, then the run bucket's). */
const serving = new AsyncLocalStorage<CheckedLimit[]>();

export function noteGuardLimits(req: FastifyRequest, checked: CheckedLimit[]): void {
  checkedByGuard.set(req, checked);
}

/** Runs `fn` (serving `req`) with a list that collects the limits checked on its way. */
export function collectingLimits<T>(req: FastifyRequest, fn: (checked: CheckedLimit[]) => T): T {
  const checked = [...(checkedByGuard.get(req) ?? [])];
  return serving.run(checked, () => fn(checked));
}

/** Adds a limit checked for the request being served, if any (a schedule's fire has none). */
export function noteLimit(c: CheckedLimit): void {
  serving.getStore()?.push(c);
}
