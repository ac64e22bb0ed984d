import { AsyncLocalStorage } from 'node:async_hooks';

/** Fields every log line written inside a context carries (absent fields are omitted). */
export interface LogContext {
  trace_id?: string;
  tenant?: string;
  dagId?: string;
  runId?: string;
  stepId?: string;
}

const storage = new AsyncLocalStorage<LogContext>();

/** Runs `fn` with `fields` added to the current log context (inner values win). */
export function withLogContext<T>(fields: LogContext, fn: () => T): T {
  const merged: LogContext = { ...storage.getStore() };
  for (const [k, v] of Object.entries(fields) as [keyof LogContext, string | undefined][]) {
    if (v !== undefined && v !== null && v !== '') merged[k] = v;
  }
  return storage.run(merged, fn);
}

/** The current log context (empty outside any). */
export function currentLogContext(): LogContext {
  return storage.getStore() ?? {};
}
