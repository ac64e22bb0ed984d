import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemTx } from '../../core/database/handles';

/** A child run of a `dag` step as its parent's step sees it. */
export interface ChildRun {
  run_id: string;
  dag_id: string;
  dag_version: number;
  status: string;
  outputs_hash: string | null;
  parent_run_id: string | null;
  parent_step_id: string | null;
}

/** The reads that resume a `dag` step when its child run ends. */
@Injectable()
export class SubDagsRepository {
  async childRun(tx: SystemTx, tenantId: string, runId: string): Promise<ChildRun | undefined> {
    const r = await sql<ChildRun>`
      select run_id, dag_id, dag_version, status, outputs_hash, parent_run_id, parent_step_id
      from run where tenant_id = ${tenantId} and run_id = ${runId}`.execute(tx);
    return r.rows[0];
  }

  /** The depth of a run (0 unless it is a child run). */
  async depth(tx: SystemTx, tenantId: string, runId: string): Promise<number> {
    const r = await sql<{ depth: number }>`
      select depth from run where tenant_id = ${tenantId} and run_id = ${runId}`.execute(tx);
    return r.rows[0]?.depth ?? 0;
  }

  /** The outputs of a run's succeeded steps (an outputs body stored as an artifact: its hash). */
  async stepOutputs(
    tx: SystemTx,
    tenantId: string,
    runId: string,
  ): Promise<{ step_id: string; outputs: unknown; outputs_hash: string | null }[]> {
    const r = await sql<{ step_id: string; outputs: unknown; outputs_hash: string | null }>`
      select step_id, outputs, outputs_hash from step
      where tenant_id = ${tenantId} and run_id = ${runId} and status = 'succeeded'
      order by step_id collate "C"`.execute(tx);
    return r.rows;
  }
}
