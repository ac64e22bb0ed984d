import { setDatabaseReady } from '../telemetry/metrics';
import type { Database } from './database';
import { pendingMigrations } from './migrator';

export interface Readiness {
  ready: boolean;
  /** `database`: ok or why not reachable; `migrations`: ok or the pending files (absent when unreachable). */
  checks: Record<string, string>;
}

/**
 * The readiness rule, for /readyz and for the orchestrator_database_ready gauge alike: the database
 * answers on the system pool and every migration and function file is applied. Each check sets the
 * gauge, so a scrape reports what the last check found.
 */
export async function checkReadiness(db: Database): Promise<Readiness> {
  const checks: Record<string, string> = {};
  try {
    const pending = await pendingMigrations((q) => db.systemPool.query(q));
    checks.database = 'ok';
    checks.migrations = pending.length === 0 ? 'ok' : `pending: ${pending.join(', ')}`;
  } catch (e) {
    checks.database = `unreachable: ${(e as Error).message}`;
  }
  const ready = checks.database === 'ok' && checks.migrations === 'ok';
  setDatabaseReady(ready);
  return { ready, checks };
}
