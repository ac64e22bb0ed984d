import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { PgListener } from '../../core/database/pg-listener';
import { PluginRegistry } from '../plugins/plugin-registry';
import { SandboxService } from '../sandbox/sandbox.module';
import { SecretsService } from '../secrets/secrets.service';
import { type ChainPlugins } from './chain';
import { ChainRunner, type Chain } from './chain-runner';
import { ClaimPolicy } from './claim-policy';
import { ConstraintsService } from './constraints.service';
import { EngineProfile } from './engine-profile';
import { completionFor, EngineStore, type ClaimedWork, type Completion } from './engine.store';
import { LeaseKeeper } from './lease-keeper';
import { runningStep, stepKey, stopStep, type RunningStep } from './running-step';
import { SideClaims } from './side-claims';
import { SlotTable } from './slot-table';
import { abortedCompletion, StepExecutor } from './step-executor';
import { SubDagsService } from './sub-dags.service';
import { processWorkerId } from './worker-id';
import { QuotaChecks } from '../plans/quota-checks';

/** The slow safety poll when no NOTIFY arrives (an idle worker issues one claim query per interval). */
const IDLE_POLL_MS = 2_000;

/**
 * The worker: claims ready steps from the per-tenant queues (woken by NOTIFY, with a slow safety
 * poll), runs their plugins with a lease it heartbeats, and reports results in batches: every
 * loop turn is one transaction that applies the finished attempts, queues their successors and
 * claims as many steps as it has free slots (so a successor usually starts without another trip
 * through the queue). Results that settle while a turn is under way are applied by a second hop
 * beside it (advanceAside), so two batches are in PostgreSQL at once.
 */
@Injectable()
export class WorkerService implements OnApplicationBootstrap, OnApplicationShutdown {
  readonly workerId = processWorkerId();
  private readonly log = new Logger('worker');
  /** The steps running in this process, by step key (a SlotTable: see there why not a Map). */
  private readonly running = new SlotTable<RunningStep>();
  /** Claimed steps waiting for a free execution slot (leased, heartbeated like running ones). */
  private local: ClaimedWork[] = [];
  private completions: Completion[] = [];
  private wake = true;
  /** A loop turn (cycle transaction) is under way. */
  private cycling = false;
  /** Tenants of the running cycle's results and of the steps waiting in the local queue. */
  private cycleTenants = new Set<string>();
  /** A hop applied beside the loop's turn (see advanceAside) is under way, and its results' tenants. */
  private aside: Promise<void> | null = null;
  private asideTenants = new Set<string>();
  /** The room for successors the hop aside and the loop's turn were given (each leaves it to the other). */
  private asideRoom = 0;
  private turnRoom = 0;
  /** The loop's last turn failed: results wait for the loop, which isolates them. */
  private failing = false;
  /** Ends the loop's wait for a batch once `concurrency` results are in. */
  private batchFull: (() => void) | null = null;
  private asideSoon = false;
  /** The loop waits for a signal with room for claims: a wake-up starts its claim at once. */
  private idleWithRoom = false;
  private stopping = false;
  private notify: (() => void) | null = null;
  private loopDone: Promise<void> | null = null;
  private readonly concurrency: number;
  /** Steps claimed ahead of free slots: claims and results travel in batches of up to this size. */
  private readonly prefetch: number;
  /** How long a chain may hold its first result before it commits (0: no chains). */
  private readonly chainMs: number;
  private readonly claims: ClaimPolicy;
  private readonly profile: EngineProfile;
  private readonly executor: StepExecutor;
  private readonly chains: ChainRunner;
  private readonly sideClaims: SideClaims;
  private readonly leases: LeaseKeeper;
  private readonly listener: PgListener;

  constructor(
    @Inject(ORDO_CONFIG) config: OrdoConfig,
    db: Database,
    private readonly store: EngineStore,
    plugins: PluginRegistry,
    constraints: ConstraintsService,
    secrets: SecretsService,
    sandbox: SandboxService,
    subDags: SubDagsService,
    quotas: QuotaChecks,
  ) {
    this.concurrency = config.ORDO_WORKER_CONCURRENCY;
    this.prefetch = Math.min(256, config.ORDO_WORKER_CONCURRENCY * 8);
    const leaseMs = config.ORDO_LEASE_TTL_MS;
    this.chainMs = config.ORDO_WORKER_CHAIN_MS;
    this.profile = new EngineProfile(config.ORDO_ENGINE_PROFILE);
    const traits: ChainPlugins = {
      sideEffectFree: (name) => plugins.get(name)?.sideEffectFree === true,
      receivesRunData: (name) => plugins.get(name)?.receivesRunData === true,
    };
    this.claims = new ClaimPolicy({
      workerId: this.workerId,
      leaseMs,
      tenantCap: config.ORDO_TENANT_MAX_IN_FLIGHT,
      sharedCap: config.ORDO_TENANT_SHARED_IN_FLIGHT,
      sharedWindowMs: config.ORDO_TENANT_SHARED_WINDOW_MS,
      traits,
    });
    this.executor = new StepExecutor(this.workerId, plugins, secrets, sandbox, constraints, subDags, quotas);
    this.chains = new ChainRunner({
      chainMs: this.chainMs,
      traits,
      dagDefinition: (t, d, v) => this.store.dagDefinition(t, d, v),
      execute: (r) => this.executor.execute(r),
      stopping: () => this.stopping,
      log: this.log,
    });
    this.sideClaims = new SideClaims({
      claim: (o) => this.store.claimNow(o),
      options: (capacity) => this.claims.options(capacity),
      // Up to `concurrency` beyond the prefetch, shared by the claims under way: these steps go
      // first, the prefetched ones can wait.
      room: (reserved) =>
        Math.min(this.concurrency, this.prefetch + this.concurrency - this.running.size - this.local.length - reserved),
      // The running turn and the hop aside serve these; side claims are for the others.
      serving: () => [...this.cycleTenants, ...this.asideTenants],
      claimed: (work) => {
        this.local.unshift(...work);
        this.pump();
      },
      stopping: () => this.stopping,
      profile: this.profile,
      log: this.log,
    });
    this.leases = new LeaseKeeper({
      heartbeat: (items) => this.store.heartbeat(this.workerId, items, leaseMs),
      held: () => [...this.running.values().map((r) => r.work), ...this.local],
      lost: (keys) => this.leasesLost(keys),
      intervalMs: Math.max(100, Math.floor(leaseMs / 3)),
      log: this.log,
    });
    this.listener = new PgListener({
      url: db.urls.system,
      applicationName: 'ordo:worker-listen',
      channels: ['ordo_ready', 'ordo_cancel'],
      onNotification: (channel, payload) => this.notified(channel, payload),
      // Notifications may have been missed while no connection listened: the loop claims at once.
      onConnected: () => this.wakeUp(),
      // Meanwhile the loop's safety poll keeps claiming; it is woken so nothing waits for a notification.
      onLost: () => this.wakeUp(),
      log: this.log,
    });
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.listener.start();
    this.loopDone = this.loop();
    this.leases.start();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopping = true;
    this.leases.stop();
    await this.sideClaims.settled();
    const deadline = Date.now() + 5_000;
    while (this.local.length > 0 && Date.now() < deadline) await sleep(10);
    for (const w of this.local.splice(0)) this.completions.push(abortedCompletion(w, this.workerId));
    for (const r of this.running.values()) stopStep(r, 'shutdown');
    while (this.running.size > 0 && Date.now() < deadline + 5_000) await sleep(10);
    await this.aside;
    this.signal();
    await this.loopDone;
    await this.listener.stop();
    this.profile.print();
  }

  /** Steps this process runs right now (for tests and metrics). */
  inFlight(): number {
    return this.running.size;
  }

  private notified(channel: string, payload: string): void {
    if (channel === 'ordo_ready') {
      if (payload) this.claims.seen(payload);
      this.wakeUp();
      // Work of a tenant the loop is not serving need not wait for its turns, nor for room in
      // the local queue that other tenants' steps fill: it is claimed at once, on the side.
      // A loop that waits with room claims at once itself.
      if (payload && !this.idleWithRoom && !this.serving(payload)) this.sideClaims.request(payload);
    } else if (channel === 'ordo_cancel' && payload) {
      for (const r of this.running.values()) if (r.work.runId === payload) stopStep(r, 'cancelled');
      this.dropLocal((w) => w.runId === payload);
    }
  }

  /** Steps whose lease this worker lost: running ones stopped, waiting ones dropped (reported aborted). */
  private leasesLost(keys: Set<string>): void {
    for (const [key, r] of this.running.entries()) if (keys.has(key)) stopStep(r, 'lease_lost');
    this.dropLocal((w) => keys.has(stepKey(w)));
  }

  /** Claimed steps waiting for a slot that will not run: reported aborted, with their leases released. */
  private dropLocal(which: (w: ClaimedWork) => boolean): void {
    const drop = this.local.filter(which);
    if (drop.length === 0) return;
    this.local = this.local.filter((w) => !which(w));
    for (const w of drop) this.completions.push(abortedCompletion(w, this.workerId));
    this.signal();
  }

  private wakeUp(): void {
    this.wake = true;
    this.signal();
  }

  private signal(): void {
    const n = this.notify;
    this.notify = null;
    n?.();
  }

  private waitForSignal(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.notify = null;
        this.wake = true;
        resolve();
      }, ms);
      this.notify = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  private async loop(): Promise<void> {
    let failures = 0;
    for (;;) {
      // Room for claims and successors, less what the hop aside may bring back (together they stay
      // within the prefetch, so the worker never holds more than its share of a tenant's cap).
      const capacity = this.stopping ? 0 : this.prefetch - this.running.size - this.local.length - this.asideRoom;
      if (this.completions.length === 0 && (capacity <= 0 || !this.wake)) {
        if (this.stopping) return;
        this.idleWithRoom = capacity > 0;
        await this.waitForSignal(IDLE_POLL_MS);
        this.idleWithRoom = false;
        continue;
      }
      const woken = this.wake;
      this.wake = false;
      // One event-loop turn lets results that are already settling join this batch (group commit);
      // a full batch goes at once, while the steps after it still run (they go aside, see advanceAside).
      // With no step running, no result can join: the batch goes at once.
      if (this.running.size > 0)
        await new Promise<void>((r) => {
          const t = setImmediate(() => {
            this.batchFull = null;
            r();
          });
          this.batchFull = () => {
            clearImmediate(t);
            this.batchFull = null;
            r();
          };
          if (this.completions.length >= this.concurrency) this.batchFull();
        });
      // After repeated failures, results go one at a time so that one that cannot be applied does not hold back the rest.
      const isolate = failures >= 3;
      const batch = isolate ? this.completions.splice(0, 1) : this.completions.splice(0);
      const t0 = this.profile.start();
      this.cycling = true;
      this.cycleTenants = new Set([...batch.map((c) => c.tenantId), ...this.local.map((w) => w.tenantId)]);
      try {
        this.turnRoom = isolate ? 0 : Math.max(0, capacity);
        const opts = this.claims.options(isolate ? 0 : capacity);
        // The results and their successors to this worker are one statement (ordo_engine_advance);
        // with work announced and room left, or no result to report, a claim follows at once (one
        // statement), so results that keep coming never starve the queue.
        const advanced = await this.store.advance(batch, opts);
        this.profile.add('advance', t0);
        const room = opts.capacity - advanced.length;
        const more =
          (woken || batch.length === 0) && room > 0 ? await this.store.cycle([], { ...opts, capacity: room }) : [];
        const claimed = [...advanced, ...more];
        if (woken && (room <= 0 || more.length >= room)) this.wake = true;
        failures = 0;
        this.failing = false;
        this.local.push(...claimed);
        this.pump();
      } catch (e) {
        failures += 1;
        this.failing = true;
        if (isolate && failures >= 6 && batch.length === 1) {
          // Dropped here, the step is not lost: its lease is no longer extended, and the reaper orphans and retries it.
          const [c] = batch;
          this.log.error(
            { err: e, runId: c.runId, stepId: c.stepId, attempt: c.attempt },
            'result cannot be applied; dropped',
          );
          failures = 3;
        } else {
          // Nothing of the batch was applied (one transaction): report it again after a short pause.
          this.completions = [...batch, ...this.completions];
          this.log.error({ err: e, failures }, 'engine cycle failed; retrying');
          await sleep(Math.min(2_000, 25 * 2 ** failures));
        }
        this.wake = true;
        if (this.stopping && failures > 5) return;
      } finally {
        this.cycling = false;
        this.turnRoom = 0;
      }
    }
  }

  /** The loop's turn or the hop aside applies results of this tenant, or its steps wait in the local queue. */
  private serving(tenantId: string): boolean {
    return this.cycleTenants.has(tenantId) || this.asideTenants.has(tenantId);
  }

  /**
   * While the loop's turn is under way, results that keep coming are applied by a second hop
   * (ordo_engine_advance on another connection, one at a time), so that PostgreSQL works on two
   * batches at once instead of one, with the room left for their successors; a batch that fails
   * goes back to the loop, which has written nothing of it.
   */
  private advanceAside(): void {
    if (this.aside || !this.cycling || this.stopping || this.failing) return;
    const batch = this.completions.splice(0);
    if (batch.length === 0) return;
    this.asideTenants = new Set(batch.map((c) => c.tenantId));
    this.asideRoom = Math.max(0, this.prefetch - this.running.size - this.local.length - this.turnRoom);
    const t0 = this.profile.start();
    this.aside = this.store
      .advance(batch, this.claims.options(this.asideRoom))
      .then(
        (claimed) => {
          this.profile.add('advance aside', t0);
          this.local.push(...claimed);
          this.pump();
        },
        (e: unknown) => {
          // Until a turn of the loop succeeds, results wait for the loop (which isolates them).
          this.failing = true;
          this.completions.unshift(...batch);
          this.log.warn({ err: e }, 'hop aside failed; the loop applies its results');
        },
      )
      .finally(() => {
        this.aside = null;
        this.asideRoom = 0;
        this.asideTenants = new Set();
        this.signal();
        this.advanceAside();
      });
  }

  /** Starts locally queued steps while execution slots are free. */
  private pump(): void {
    while (this.running.size < this.concurrency && this.local.length > 0) this.start(this.local.shift()!);
  }

  private start(work: ClaimedWork): void {
    this.claims.seen(work.tenantId);
    const r = runningStep(work);
    this.chains.want(work);
    this.track(r, this.executor.execute(r));
  }

  /**
   * Holds `r`'s slot until its result is reported: with the chain that follows it when its step
   * can have one (followChain), else to the loop's next batch.
   */
  private track(r: RunningStep, result: Promise<Completion>): void {
    const key = stepKey(r.work);
    this.running.set(key, r);
    const t0 = this.profile.start();
    // An executor that rejects (a fault it did not turn into an outcome) still ends the attempt:
    // as a transient failure, retried by the step's policy, so the slot and the lease are not held.
    const settled = result.catch((e: unknown): Completion => {
      this.log.error({ err: e, runId: r.work.runId, stepId: r.work.stepId }, 'step executor failed');
      const message = e instanceof Error ? e.message : String(e);
      return completionFor(r.work, this.workerId, {
        status: 'failed',
        error: { code: 'EXECUTOR_FAILED', message, retryable: true },
        logs: [],
      });
    });
    void settled.then(async (c) => {
      this.profile.add('execute', t0);
      if (c.outcome.status === 'succeeded' && !r.reason && this.chainMs > 0 && !this.stopping) {
        const chain = await this.chains.follow(r, c).catch((e: unknown) => {
          this.log.warn({ err: e, runId: r.work.runId }, 'chain not planned; the result goes alone');
          return null;
        });
        if (chain) {
          await this.commitChain(r, c, chain);
          return;
        }
      }
      this.running.delete(key);
      this.report(c);
    });
  }

  /** Hands a result to the loop's next batch (or to the hop aside). */
  private report(c: Completion): void {
    this.completions.push(c);
    if (this.batchFull && this.completions.length >= this.concurrency) this.batchFull();
    if (!this.stopping) this.pump();
    this.signal();
    if (this.cycling && !this.aside && !this.asideSoon) {
      // The results that settle in this event-loop turn go together.
      this.asideSoon = true;
      setImmediate(() => {
        this.asideSoon = false;
        this.advanceAside();
      });
    }
  }

  /**
   * Commits a chain (ordo_engine_chain) from `r`, whose slot it held: the step ahead, dispatched to
   * this worker, goes on in that slot as its attempt; the steps after the chain join the local
   * queue. A chain the database refuses is dropped, the step ahead stopped, and `head` reported
   * alone: the chain's steps then run again from the queue (they had no effect but their results).
   */
  private async commitChain(r: RunningStep, head: Completion, chain: Chain): Promise<void> {
    const ahead = chain.ahead?.link.work;
    const t0 = this.profile.start();
    let claimed: ClaimedWork[] | null = null;
    try {
      claimed = await this.store.chain(
        head,
        chain.links,
        this.claims.options(1),
        ahead && { stepId: ahead.stepId, traceparent: ahead.traceparent },
      );
    } catch (e) {
      this.log.warn({ err: e, runId: head.runId }, 'chain not applied; its first result goes alone');
    }
    this.profile.add(claimed ? `chain of ${chain.links.length + 1}` : 'chain refused', t0);
    this.running.delete(stepKey(r.work));
    if (claimed === null) {
      if (chain.ahead) stopStep(chain.ahead.link, 'superseded');
      this.report(head);
      return;
    }
    const adopted = ahead && claimed.find((w) => w.runId === ahead.runId && w.stepId === ahead.stepId);
    if (adopted && chain.ahead) {
      const link = chain.ahead.link;
      Object.assign(link.work, { attempt: adopted.attempt, epoch: adopted.epoch, dispatchSeq: adopted.dispatchSeq });
      this.track(
        link,
        chain.ahead.result.then((c) => ({ ...c, attempt: adopted.attempt, epoch: adopted.epoch })),
      );
    } else if (chain.ahead) stopStep(chain.ahead.link, 'superseded');
    this.local.push(...claimed.filter((w) => w !== adopted));
    this.pump();
    this.signal();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
