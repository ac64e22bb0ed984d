import { AsyncLocalStorage } from 'node:async_hooks';
import { context, createContextKey, type Context } from '@opentelemetry/api';

/** Fields every log line written inside a context carries (absent fields are omitted). */
export interface LogContext {
  trace_id?: string;
  tenant?: string;
  dagId?: string;
  runId?: string;
  stepId?: string;
}

const storage = new AsyncLocalStorage<LogContext>();
/** Log fields carried by an OpenTelemetry context (a step's span context carries its step's). */
const LOG_FIELDS = createContextKey('ordo.log-fields');

/** Runs `fn` with `fields` added to the current log context (inner values win). */
export function withLogContext<T>(fields: LogContext, fn: () => T): T {
  const merged: LogContext = { ...storage.getStore() };
  for (const [k, v] of Object.entries(fields) as [keyof LogContext, string | undefined][]) {
    if (v !== undefined && v !== null && v !== '') merged[k] = v;
  }
  return storage.run(merged, fn);
}

/**
 * `ctx` carrying `fields` for the log lines written while it is active: one context for a span and
 * its log fields (a step's work runs in it), instead of a second asynchronous context beside it.
 */
export function withLogFields(ctx: Context, fields: LogContext): Context {
  return ctx.setValue(LOG_FIELDS, fields);
}

/** The log fields `ctx` carries (withLogFields), if any. */
export function logFieldsOf(ctx: Context): LogContext | undefined {
  return ctx.getValue(LOG_FIELDS) as LogContext | undefined;
}

/** The current log context (empty outside any): withLogContext's fields, then the active OpenTelemetry context's. */
export function currentLogContext(): LogContext {
  const own = storage.getStore();
  const carried = logFieldsOf(context.active());
  if (!carried) return own ?? {};
  return own ? { ...own, ...carried } : carried;
}
