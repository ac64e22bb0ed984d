import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { RetentionRepository, type MonthDrop, type RetentionPolicy } from './retention.repository';

/** Month partitions kept made ahead of the current month. */
export const PARTITION_MONTHS_AHEAD = 3;
/** Runs one purge transaction deletes. */
export const RETENTION_BATCH = 200;
/** Purge batches per tenant per pass: the rest waits for the next pass, so one tenant does not hold the job. */
export const MAX_BATCHES_PER_TENANT = 50;
/** The pause before the next pass when a tenant had expired runs left (the pass catches up without waiting the interval). */
const CATCH_UP_MS = 1_000;
const DAY_MS = 86_400_000;

export interface RetentionPass {
  partitionsMade: string[];
  months: (MonthDrop & { month: string })[];
  runsDeleted: Record<string, number>;
  artifactsDeleted: Record<string, number>;
  /** Tenants whose expired runs outlasted their batches: the next pass comes after CATCH_UP_MS. */
  backlog: string[];
}

/**
 * Retention (scheduler role): at start and every ORDO_RETENTION_INTERVAL_MS it makes the month
 * partitions ahead, drops whole ended months no tenant needs any more, then deletes each tenant's
 * expired runs in small batches and sweeps the artifacts they named (those nothing of the tenant
 * names any more go); when a tenant has more than a pass's batches, the next pass comes a second
 * later, until it caught up. A tenant's period is its plan's retentionDays, else
 * ORDO_RETENTION_DAYS; without either its runs are kept. Every replica may run it: purge batches
 * skip runs another holds, a month's drop re-checks under its own transaction, and a sweep takes
 * the candidates it deletes.
 */
@Injectable()
export class RetentionService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('retention');
  private timer: NodeJS.Timeout | null = null;
  private catchUp: NodeJS.Timeout | null = null;
  private busy: Promise<unknown> | null = null;

  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
    private readonly repo: RetentionRepository,
  ) {}

  onApplicationBootstrap(): void {
    if (!this.config.ORDO_ROLES.includes('scheduler')) return;
    const tick = () => {
      if (!this.busy)
        this.busy = this.pass()
          .then((p) => {
            if (p.backlog.length > 0 && this.timer) {
              this.catchUp = setTimeout(tick, CATCH_UP_MS);
              this.catchUp.unref();
            }
          })
          .catch((e: unknown) => this.log.error({ err: e }, 'retention pass failed'))
          .finally(() => (this.busy = null));
    };
    tick();
    this.timer = setInterval(tick, this.config.ORDO_RETENTION_INTERVAL_MS);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.catchUp) clearTimeout(this.catchUp);
    await this.busy;
  }

  /** The tenants with a retention period and their cutoffs at `now`. */
  async policies(now = new Date()): Promise<RetentionPolicy[]> {
    const days = await this.repo.retentionDays(this.db.system, this.config.ORDO_RETENTION_DAYS ?? null);
    return days.map((d) => ({
      tenantId: d.tenantId,
      cutoff: new Date(now.getTime() - d.days * DAY_MS),
      requiresExport: this.config.ORDO_RETENTION_REQUIRES_EXPORT,
    }));
  }

  /** One pass: partitions ahead, whole months dropped, then batched deletes per tenant. */
  async pass(now = new Date()): Promise<RetentionPass> {
    const partitionsMade = await this.repo.ensurePartitions(this.db.system, PARTITION_MONTHS_AHEAD);
    if (partitionsMade.length > 0) this.log.log({ partitions: partitionsMade }, 'made partitions');
    const policies = await this.policies(now);
    const months: RetentionPass['months'] = [];
    const runsDeleted: Record<string, number> = {};
    const artifactsDeleted: Record<string, number> = {};
    const backlog: string[] = [];
    if (policies.length === 0) return { partitionsMade, months, runsDeleted, artifactsDeleted, backlog };
    for (const month of await this.repo.endedMonths(this.db.system)) {
      const r = await this.repo.dropMonth(this.db.system, month, policies);
      months.push({ ...r, month: month.toISOString() });
      if (r.dropped)
        this.log.log({ month, partitions: r.partitions, lockedMs: r.lockedMs }, 'dropped month partitions');
      // Months are checked oldest first: one a tenant still needs holds the later ones too.
      else if (r.heldBy) break;
    }
    for (const p of policies) {
      let n = 0;
      let full = false;
      for (let b = 0; b < MAX_BATCHES_PER_TENANT; b++) {
        const k = await this.repo.purge(this.db.system, p, RETENTION_BATCH);
        n += k;
        full = k === RETENTION_BATCH;
        if (!full) break;
      }
      if (full) backlog.push(p.tenantId);
      if (n > 0) {
        runsDeleted[p.tenantId] = n;
        this.log.log({ tenant: p.tenantId, runs: n, cutoff: p.cutoff }, 'deleted expired runs');
      }
      const a = await this.repo.sweepArtifacts(this.db.system, p.tenantId);
      if (a > 0) {
        artifactsDeleted[p.tenantId] = a;
        this.log.log({ tenant: p.tenantId, artifacts: a }, 'deleted artifacts no run names');
      }
    }
    return { partitionsMade, months, runsDeleted, artifactsDeleted, backlog };
  }
}
