import { dagDefinition, type DagDefinitionInput } from '../../src/modules/dags/dag-definition';
import type { JsonObject } from '../../src/modules/plugins/plugin';
import type { ChainedEvent } from '../../src/modules/runs/run-events';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { canonicalHash } from '../../src/core/json/canonical-json';
import type { TestApp } from '../support/test-app';

/** Publishes a DAG version straight through the DAGs repository (the definition is validated by its schema). */
export async function publishDag(app: TestApp, tenantId: string, input: DagDefinitionInput): Promise<number> {
  const def = dagDefinition.parse(input);
  const repo = new DagsRepository();
  return app.ordo.database.withTenant(tenantId, async (tx) => {
    const existing = await repo.findByContentHash(tx, def.id, canonicalHash(def));
    if (existing) return existing.version;
    const latest = await repo.lockDag(tx, def.id);
    const v = await repo.insertVersion(tx, {
      dagId: def.id,
      version: latest + 1,
      contentHash: canonicalHash(def),
      definition: def,
      sourceFormat: 'json',
      owner: 'test',
      signature: null,
      bundleHash: null,
    });
    return v.version;
  });
}

export async function disableVersion(app: TestApp, tenantId: string, dagId: string, version: number): Promise<void> {
  await app.ordo.database.withTenant(tenantId, (tx) =>
    new DagsRepository().setStatus(tx, dagId, version, 'disabled', 'test'),
  );
}

/** Polls a run until it reaches a terminal state (bounded). */
export async function waitForRun(
  app: TestApp,
  as: { token: string; tenantId: string },
  runId: string,
  timeoutMs = 20_000,
) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await app.request('GET', `/api/v1/runs/${runId}`, { as });
    if (r.status !== 200) throw new Error(`GET run ${runId}: ${r.status} ${r.text}`);
    if (['succeeded', 'failed', 'cancelled'].includes(r.body.status as string)) return r.body;
    if (Date.now() > deadline) throw new Error(`run ${runId} still ${r.body.status} after ${timeoutMs} ms: ${r.text}`);
    await new Promise((res) => setTimeout(res, 25));
  }
}

export const chainDag = (id: string, n: number, extra: Record<string, unknown> = {}): DagDefinitionInput => ({
  id,
  steps: Array.from({ length: n }, (_, i) => ({
    id: `s${String(i + 1).padStart(2, '0')}`,
    plugin: 'noop',
    dependsOn: i === 0 ? [] : [`s${String(i).padStart(2, '0')}`],
    ...extra,
  })),
});

/** A run event as GET /api/v1/runs/{runId}/events answers it. */
export interface ApiEvent {
  seq: number;
  type: string;
  stepId: string | null;
  attempt: number | null;
  actor: string;
  data: JsonObject;
  createdUtc: string;
  prevHash: string;
  hash: string;
}

/** A run's events, through the API (the first 1,000). */
export async function runEvents(app: TestApp, as: { token: string; tenantId: string }, runId: string) {
  return (await app.request('GET', `/api/v1/runs/${runId}/events?limit=1000`, { as })).body.items as ApiEvent[];
}

/** A run's events from the API as the chain verifier (verifyChain) takes them. */
export function chainOf(events: ApiEvent[], tenantId: string, runId: string): ChainedEvent[] {
  return events.map((e) => ({ ...e, tenantId, runId, createdAt: e.createdUtc }));
}
