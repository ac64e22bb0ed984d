import { Inject, Injectable } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { ConstraintsService } from '../engine/constraints.service';
import { processWorkerId } from '../engine/worker-id';
import type { HandOver } from '../engine/engine.store';
import { runningStep } from '../engine/running-step';
import { StepExecutor } from '../engine/step-executor';
import { SubDagsService } from '../engine/sub-dags.service';
import { QuotaChecks } from '../plans/quota-checks';
import { PluginRegistry } from '../plugins/plugin-registry';
import { SandboxService } from '../sandbox/sandbox.module';
import { SecretsService } from '../secrets/secrets.service';
import { QUEUE_STEP_PLUGIN } from './worker-names';

/** Queue steps one result transaction hands over at most (the rest go through the queue). */
const HAND_OVER_CAPACITY = 256;

/**
 * Queue steps handed over in the transaction of the results that made them ready: an external
 * worker's result that readies a `queue` step dispatches it to this process (ordo_engine_resolve
 * with `handOver`), whose StepExecutor makes its task as a worker would (conditions,
 * preconditions, templates, sealed secrets; a queue step runs no code of the tenant) and hands it
 * back as waiting, with its task opened, before the commit. A chain of queue steps so goes from one
 * external worker to the next without the built-in worker's claim and hand-back transactions.
 */
@Injectable()
export class QueueHandOver {
  readonly workerId = processWorkerId('api');
  /** What a result transaction is given to hand queue steps over (see EngineStore.withResolve). */
  readonly handOver: HandOver;

  constructor(
    @Inject(ORDO_CONFIG) config: OrdoConfig,
    plugins: PluginRegistry,
    secrets: SecretsService,
    sandbox: SandboxService,
    constraints: ConstraintsService,
    subDags: SubDagsService,
    quotas: QuotaChecks,
  ) {
    const executor = new StepExecutor(this.workerId, plugins, secrets, sandbox, constraints, subDags, quotas);
    this.handOver = {
      plugin: QUEUE_STEP_PLUGIN,
      opts: {
        workerId: this.workerId,
        capacity: HAND_OVER_CAPACITY,
        leaseMs: config.ORDO_LEASE_TTL_MS,
        tenantCap: config.ORDO_TENANT_MAX_IN_FLIGHT,
      },
      run: (work) => Promise.all(work.map((w) => executor.execute(runningStep(w)))),
    };
  }
}
