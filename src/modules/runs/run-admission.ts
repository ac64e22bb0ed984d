import type { SystemTx, TenantTx } from '../../core/database/handles';
import type { Book, RunBooks } from './run-book';
import type { RunsRepository } from './runs.repository';

/**
 * When runs end, runs of the same DAGs waiting for a maxConcurrentRuns slot (action queue) are
 * admitted, oldest first, in the same transaction: their ready steps are queued and recorded.
 */
export async function admitWaitingRuns(
  tx: SystemTx | TenantTx,
  repo: RunsRepository,
  books: RunBooks,
  ending: Book[],
): Promise<void> {
  if (ending.length === 0) return;
  const dags = await repo.lockWaitingDags(
    tx,
    ending.map((b) => ({ tenantId: b.row.tenant_id, dagId: b.row.dag_id })),
  );
  if (dags.length === 0) return;
  const waiting = new Set(dags.map((d) => `${d.tenant_id}/${d.dag_id}`));
  const relevant = ending.filter((b) => waiting.has(`${b.row.tenant_id}/${b.row.dag_id}`));
  const admissible = await repo.admissible(
    tx,
    relevant.map((b) => ({ tenantId: b.row.tenant_id, runId: b.row.run_id, dagId: b.row.dag_id })),
  );
  if (admissible.length === 0) return;
  const keys = admissible.map((a) => ({ tenantId: a.tenant_id, runId: a.run_id }));
  books.add(
    await repo.lockRuns(
      tx,
      keys.filter((k) => !books.get(k.tenantId, k.runId)),
    ),
  );
  const steps = await repo.admit(tx, keys);
  for (const k of keys)
    books.event(books.get(k.tenantId, k.runId)!, {
      type: 'run.admitted',
      actor: 'engine',
      data: { reason: 'max_concurrent_runs' },
    });
  for (const s of steps)
    books.event(books.get(s.tenant_id, s.run_id)!, { type: 'step.queued', stepId: s.step_id, actor: 'engine' });
  await repo.enqueue(
    tx,
    steps.map((s) => ({ tenantId: s.tenant_id, runId: s.run_id, stepId: s.step_id })),
  );
}
