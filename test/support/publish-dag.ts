import type { Database } from '../../src/core/database/database';
import { canonicalHash } from '../../src/core/json/canonical-json';
import { dagDefinition, type DagDefinitionInput } from '../../src/modules/dags/dag-definition';
import { DagsRepository } from '../../src/modules/dags/dags.repository';

/** Publishes the next version of a DAG for a tenant straight through the repository (medium tests). */
export async function publishDagVersion(db: Database, tenantId: string, input: DagDefinitionInput): Promise<void> {
  const def = dagDefinition.parse(input);
  const repo = new DagsRepository();
  await db.withTenant(tenantId, async (tx) => {
    const latest = await repo.lockDag(tx, def.id);
    await repo.insertVersion(tx, {
      dagId: def.id,
      version: latest + 1,
      contentHash: canonicalHash(def),
      definition: def,
      sourceFormat: 'json',
      owner: 't',
      signature: null,
      bundleHash: null,
    });
  });
}
