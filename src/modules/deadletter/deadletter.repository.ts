import { Injectable } from '@nestjs/common';
import type { Selectable } from 'kysely';
import type { DeadLetter } from '../../core/database/db.generated';
import { tenantOf, type TenantTx } from '../../core/database/handles';

export type DeadLetterRow = Selectable<DeadLetter>;

/** A tenant's dead-letter entries (the engine enters them; the API reads and resolves them). */
@Injectable()
export class DeadLetterRepository {
  async list(
    tx: TenantTx,
    q: { state: string; limit: number; after?: { t: string; id: string } },
  ): Promise<DeadLetterRow[]> {
    let query = tx
      .selectFrom('dead_letter')
      .selectAll()
      .where('tenant_id', '=', tenantOf(tx))
      .where('state', '=', q.state);
    const after = q.after;
    if (after !== undefined)
      query = query.where((eb) =>
        eb.or([
          eb('created_at', '<', new Date(after.t)),
          eb.and([eb('created_at', '=', new Date(after.t)), eb('run_id', '<', after.id)]),
        ]),
      );
    return query.orderBy('created_at', 'desc').orderBy('run_id', 'desc').limit(q.limit).execute();
  }

  async find(tx: TenantTx, runId: string, lock = false): Promise<DeadLetterRow | undefined> {
    const q = tx
      .selectFrom('dead_letter')
      .selectAll()
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId);
    return (lock ? q.forUpdate() : q).executeTakeFirst();
  }

  async resolve(
    tx: TenantTx,
    runId: string,
    to: { state: 'requeued' | 'discarded'; by: string; requeuedRunId?: string },
  ): Promise<DeadLetterRow> {
    return tx
      .updateTable('dead_letter')
      .set({
        state: to.state,
        resolved_at: new Date(),
        resolved_by: to.by,
        requeued_run_id: to.requeuedRunId ?? null,
      })
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .where('state', '=', 'open')
      .returningAll()
      .executeTakeFirstOrThrow();
  }
}
