import type { DagVersionRecord } from '../dags/dags.repository';

/** Which DAG version a create request asks for: a version number, or the latest active one. */
export const versionKey = (r: { dagId: string; version?: number }): string => `${r.dagId}@${r.version ?? 'latest'}`;

const entryKey = (tenantId: string, key: string): string => `${tenantId}\u0000${key}`;

/**
 * The DAG versions this process resolved for run creation, by tenant and request (versionKey), so
 * that creating a run need not look its version up again: a version's content never changes. What
 * can change (a version disabled, a newer one published) is checked by the statement that writes
 * the runs (ordo_create_runs), which writes nothing when a version is no longer the one to use;
 * the caller then forgets it and resolves it again. At most `max` entries, the least recently used
 * going first.
 */
export class DagVersionCache {
  private readonly entries = new Map<string, DagVersionRecord>();

  constructor(private readonly max = 1_000) {}

  remember(tenantId: string, key: string, v: DagVersionRecord): void {
    const k = entryKey(tenantId, key);
    this.entries.delete(k);
    this.entries.set(k, v);
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value!);
  }

  /**
   * The versions of every request, by versionKey, when all are known and none has a
   * maxConcurrentRuns limit (its slots are counted in a transaction); else null.
   */
  known(tenantId: string, reqs: readonly { dagId: string; version?: number }[]): Map<string, DagVersionRecord> | null {
    const out = new Map<string, DagVersionRecord>();
    for (const r of reqs) {
      const key = versionKey(r);
      const k = entryKey(tenantId, key);
      const v = this.entries.get(k);
      if (!v || v.definition.constraints?.maxConcurrentRuns) return null;
      this.entries.delete(k);
      this.entries.set(k, v);
      out.set(key, v);
    }
    return out;
  }

  forget(tenantId: string, reqs: readonly { dagId: string; version?: number }[]): void {
    for (const r of reqs) this.entries.delete(entryKey(tenantId, versionKey(r)));
  }
}
