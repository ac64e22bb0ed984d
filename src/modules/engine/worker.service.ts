import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import pg from 'pg';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { recordDispatch, recordStepFinished } from '../../core/telemetry/metrics';
import { currentTraceparent, withChildSpan, withStepSpan } from '../../core/telemetry/tracing';
import type { JsonObject, PluginContext, PluginError, PluginResult, StepLogLine } from '../plugins/plugin';
import { PluginRegistry } from '../plugins/plugin-registry';
import { SandboxService } from '../sandbox/sandbox.module';
import { makeRedactor } from '../secrets/redact';
import { SecretNotFoundError, SecretsService } from '../secrets/secrets.service';
import { renderTemplate, TemplateError, templateRefs } from '../templating/template';
import { chainPlan, nextLink, type ChainPlan, type ChainPlugins } from './chain';
import { ConstraintsService } from './constraints.service';
import { SlotTable } from './slot-table';
import { TenantActivity } from './tenant-activity';
import {
  completionFor,
  EngineStore,
  type ChainLink,
  type ClaimedWork,
  type ClaimOptions,
  type Completion,
} from './engine.store';

/** With ORDO_ENGINE_PROFILE (configuration) the worker sums its time per phase and prints it at shutdown (benchmarks). */
let PROFILE = false;
const profile = new Map<string, { n: number; ms: number }>();
function prof(k: string, ms: number): void {
  const e = profile.get(k) ?? { n: 0, ms: 0 };
  e.n += 1;
  e.ms += ms;
  profile.set(k, e);
}

/** The slow safety poll when no NOTIFY arrives (an idle worker issues one claim query per interval). */
const IDLE_POLL_MS = 2_000;
/** Claims on the side (see claimNow) under way at once, each for the tenants its wake-ups named. */
const SIDE_CLAIMS = 2;
const MAX_LOG_LINES = 1_000;
/** Steps a chain runs after its first before it commits. */
const MAX_CHAIN_LINKS = 32;
/** DAG versions whose plans the worker keeps for its chains. */
const MAX_PLANS = 1_000;

type StopReason = 'cancelled' | 'timeout' | 'max_allowed_run_time' | 'lease_lost' | 'shutdown' | 'superseded';

interface Running {
  work: ClaimedWork;
  ac: AbortController;
  reason: StopReason | null;
  /** The chain's step running after this one (see followChain): stopped with it. */
  link?: Running;
  /** Settles the plugin call under way as aborted (set while one is). */
  aborted?: () => void;
}

/** The steps a chain ran after its first, and the one it still runs (or that did not succeed). */
interface Chain {
  links: ChainLink[];
  ahead?: { link: Running; result: Promise<Completion> };
}

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
  readonly workerId = `${os.hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  private readonly log = new Logger('worker');
  /** The steps running in this process, by step key (a SlotTable: see there why not a Map). */
  private readonly running = new SlotTable<Running>();
  /** Claimed steps waiting for a free execution slot (leased, heartbeated like running ones). */
  private local: ClaimedWork[] = [];
  private completions: Completion[] = [];
  private wake = true;
  /** A loop turn (cycle transaction) is under way. */
  private cycling = false;
  /** Tenants of the running cycle's results and of the steps waiting in the local queue. */
  private cycleTenants = new Set<string>();
  /** Tenants woken while the loop does not serve them, waiting for a claim on the side (see claimNow). */
  private sidePending = new Set<string>();
  /** Claims on the side under way, by the tenants each claims for, and the room each was given. */
  private sideClaims = new Map<Promise<void>, { tenants: string[]; room: number }>();
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
  private listener: pg.Client | null = null;
  private listenFailures = 0;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private readonly concurrency: number;
  /** Steps claimed ahead of free slots: claims and results travel in batches of up to this size. */
  private readonly prefetch: number;
  private readonly leaseMs: number;
  private readonly tenantCap: number;
  /** The tenant cap while tenants share the engine: ORDO_TENANT_SHARED_IN_FLIGHT, at most the full cap (0: the full cap). */
  private readonly sharedCap: number;
  /** Whether tenants share the engine: work of two of them seen within ORDO_TENANT_SHARED_WINDOW_MS. */
  private readonly activity: TenantActivity;
  /** How long a chain may hold its first result before it commits (0: no chains). */
  private readonly chainMs: number;
  /** What the engine asks of a plugin by name. */
  private readonly traits: ChainPlugins = {
    sideEffectFree: (name) => this.plugins.get(name)?.sideEffectFree === true,
    receivesRunData: (name) => this.plugins.get(name)?.receivesRunData === true,
  };
  /** DAG versions' plans by tenant, DAG and version (or their load under way). */
  private readonly plans = new Map<string, ChainPlan | Promise<void>>();

  constructor(
    @Inject(ORDO_CONFIG) config: OrdoConfig,
    private readonly db: Database,
    private readonly store: EngineStore,
    private readonly plugins: PluginRegistry,
    private readonly constraints: ConstraintsService,
    private readonly secrets: SecretsService,
    private readonly sandbox: SandboxService,
  ) {
    this.concurrency = config.ORDO_WORKER_CONCURRENCY;
    this.prefetch = Math.min(256, config.ORDO_WORKER_CONCURRENCY * 8);
    this.leaseMs = config.ORDO_LEASE_TTL_MS;
    this.tenantCap = config.ORDO_TENANT_MAX_IN_FLIGHT;
    const shared = config.ORDO_TENANT_SHARED_IN_FLIGHT;
    this.sharedCap = shared > 0 ? Math.min(this.tenantCap, shared) : this.tenantCap;
    this.activity = new TenantActivity(config.ORDO_TENANT_SHARED_WINDOW_MS);
    this.chainMs = config.ORDO_WORKER_CHAIN_MS;
    PROFILE = config.ORDO_ENGINE_PROFILE;
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.listen();
    this.loopDone = this.loop();
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), Math.max(100, Math.floor(this.leaseMs / 3)));
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopping = true;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    await Promise.all(this.sideClaims.keys());
    const deadline = Date.now() + 5_000;
    while (this.local.length > 0 && Date.now() < deadline) await sleep(10);
    for (const w of this.local.splice(0)) this.completions.push(abortedCompletion(w, this.workerId));
    for (const r of this.running.values()) this.stop(r, 'shutdown');
    while (this.running.size > 0 && Date.now() < deadline + 5_000) await sleep(10);
    await this.aside;
    this.signal();
    await this.loopDone;
    const l = this.listener;
    this.listener = null;
    await l?.end().catch(() => undefined);
    if (PROFILE)
      for (const [k, v] of profile)
        console.error(`engine profile ${k}: n=${v.n} total=${v.ms.toFixed(0)}ms mean=${(v.ms / v.n).toFixed(3)}ms`);
  }

  /** Steps this process runs right now (for tests and metrics). */
  inFlight(): number {
    return this.running.size;
  }

  private async listen(): Promise<void> {
    const client = new pg.Client({ connectionString: this.db.urls.system, application_name: 'ordo:worker-listen' });
    client.on('notification', (n) => {
      if (n.channel === 'ordo_ready') {
        if (n.payload) this.activity.seen(n.payload, performance.now());
        this.wake = true;
        this.signal();
        // Work of a tenant the loop is not serving need not wait for its turns, nor for room in
        // the local queue that other tenants' steps fill: it is claimed at once, on the side.
        // A loop that waits with room claims at once itself.
        if (n.payload && !this.idleWithRoom && !this.serving(n.payload)) this.claimNow(n.payload);
      } else if (n.channel === 'ordo_cancel' && n.payload) {
        for (const r of this.running.values()) if (r.work.runId === n.payload) this.stop(r, 'cancelled');
        const drop = this.local.filter((w) => w.runId === n.payload);
        if (drop.length > 0) {
          this.local = this.local.filter((w) => w.runId !== n.payload);
          for (const w of drop) this.completions.push(abortedCompletion(w, this.workerId));
          this.signal();
        }
      }
    });
    // One reconnect per lost client, whatever mix of 'error' and 'end' it emits; the lost client is
    // closed, so terminated connections never pile up.
    let lost = false;
    const reconnect = (e?: unknown) => {
      if (lost) return;
      lost = true;
      if (this.listener === client) this.listener = null;
      void client.end().catch(() => undefined);
      if (this.stopping) return;
      const delay = Math.min(5_000, 250 * 2 ** Math.min(this.listenFailures++, 5));
      this.log.warn(
        { err: e instanceof Error ? e.message : e, retryInMs: delay },
        'notification connection lost; reconnecting',
      );
      setTimeout(() => void this.listen(), delay);
      // Meanwhile the loop's safety poll keeps claiming; wake it so nothing waits for a notification.
      this.wake = true;
      this.signal();
    };
    client.on('error', reconnect);
    client.on('end', () => reconnect(new Error('connection ended')));
    try {
      await client.connect();
      await client.query('listen ordo_ready; listen ordo_cancel');
    } catch (e) {
      reconnect(e);
      return;
    }
    if (this.stopping) {
      lost = true;
      await client.end().catch(() => undefined);
      return;
    }
    this.listenFailures = 0;
    this.listener = client;
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
      const t0 = PROFILE ? performance.now() : 0;
      if (PROFILE) for (const c of batch) prof('completion→cycle', t0 - (c as { reportedAt?: number }).reportedAt!);
      this.cycling = true;
      this.cycleTenants = new Set([...batch.map((c) => c.tenantId), ...this.local.map((w) => w.tenantId)]);
      try {
        this.turnRoom = isolate ? 0 : Math.max(0, capacity);
        const opts = this.claimOptions(isolate ? 0 : capacity);
        // The results and their successors to this worker are one statement (ordo_engine_advance);
        // with work announced and room left, or no result to report, a claim follows at once (one
        // statement), so results that keep coming never starve the queue.
        const advanced = await this.store.advance(batch, opts);
        if (PROFILE) prof('advance', performance.now() - t0);
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

  /**
   * Woken for a tenant the loop is not serving: claims its ready steps at once, in a statement of
   * its own for the tenants woken so far that skips whatever other transactions hold, so that
   * another tenant's step waits neither for the loop's turn nor for room in the local queue. Up to
   * SIDE_CLAIMS such claims are under way at once, a tenant in one at a time (a wake-up meanwhile
   * is served by the next), so a slow claim for one tenant does not hold back the next tenant's
   * step. Their steps go to the front of the local queue.
   */
  private claimNow(tenantId?: string): void {
    if (tenantId) this.sidePending.add(tenantId);
    while (!this.stopping && this.sideClaims.size < SIDE_CLAIMS && this.sidePending.size > 0) {
      const busy = new Set([...this.sideClaims.values()].flatMap((c) => c.tenants));
      const tenants = [...this.sidePending].filter((t) => !busy.has(t));
      if (tenants.length === 0) return;
      // Up to `concurrency` beyond the prefetch, shared by the claims under way: these steps go
      // first, the prefetched ones can wait.
      const reserved = [...this.sideClaims.values()].reduce((n, c) => n + c.room, 0);
      const room = Math.min(
        this.concurrency,
        this.prefetch + this.concurrency - this.running.size - this.local.length - reserved,
      );
      if (room <= 0) {
        // No room: the loop's next turn claims for them (the wake-up is kept for it).
        this.sidePending.clear();
        return;
      }
      for (const t of tenants) this.sidePending.delete(t);
      const t0 = PROFILE ? performance.now() : 0;
      const claim: Promise<void> = this.store
        .claimNow({
          ...this.claimOptions(room),
          onlyTenants: tenants,
          // The running cycle serves these; this claim is for the others.
          excludeTenants: [...this.cycleTenants, ...this.asideTenants],
        })
        .then(
          (claimed) => {
            if (PROFILE) prof(claimed.length > 0 ? 'claimNow' : 'claimNow (nothing)', performance.now() - t0);
            if (claimed.length === 0) return;
            this.local.unshift(...claimed);
            this.pump();
          },
          (e: unknown) => this.log.warn({ err: e }, 'claim failed'),
        )
        .finally(() => {
          this.sideClaims.delete(claim);
          this.claimNow();
        });
      this.sideClaims.set(claim, { tenants, room });
    }
  }

  /**
   * What this worker's claims and hops are given: room for `capacity` steps, its lease and the
   * tenant cap, the shared one while tenants share the engine.
   */
  private claimOptions(capacity: number): ClaimOptions {
    return {
      workerId: this.workerId,
      capacity,
      leaseMs: this.leaseMs,
      tenantCap: this.activity.shared(performance.now()) ? this.sharedCap : this.tenantCap,
      receivesRunData: this.traits.receivesRunData,
    };
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
    const t0 = PROFILE ? performance.now() : 0;
    this.aside = this.store
      .advance(batch, this.claimOptions(this.asideRoom))
      .then(
        (claimed) => {
          if (PROFILE) prof('advance aside', performance.now() - t0);
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
    this.activity.seen(work.tenantId, performance.now());
    const r: Running = { work, ac: new AbortController(), reason: null };
    this.wantPlan(work);
    this.track(r, this.execute(r));
  }

  /**
   * Holds `r`'s slot until its result is reported: with the chain that follows it when its step
   * can have one (followChain), else to the loop's next batch.
   */
  private track(r: Running, result: Promise<Completion>): void {
    const key = stepKey(r.work);
    this.running.set(key, r);
    const t0 = PROFILE ? performance.now() : 0;
    void result.then(async (c) => {
      if (PROFILE) prof('execute', performance.now() - t0);
      if (c.outcome.status === 'succeeded' && !r.reason && this.chainMs > 0 && !this.stopping) {
        const chain = await this.followChain(r, c);
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
    if (PROFILE) (c as { reportedAt?: number }).reportedAt = performance.now();
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
   * After `r`'s step succeeded: runs the steps that follow it in a chain (nextLink: each the only
   * dependent of the one before, side-effect free) one after the other, before its result commits,
   * for up to ORDO_WORKER_CHAIN_MS. A step that does not finish in that time, or does not succeed,
   * is the chain's step ahead: the chain commits without it and the step is dispatched to this
   * worker, which reports its result as that attempt's. Null when no step follows.
   */
  private async followChain(r: Running, head: Completion): Promise<Chain | null> {
    const plan = this.plans.get(planKey(r.work));
    if (!plan || plan instanceof Promise || head.outcome.status !== 'succeeded') return null;
    const links: ChainLink[] = [];
    const hasInputs = r.work.needsData;
    let prev = r.work;
    let outputs = head.outcome.outputs;
    // The chain's deadline, one timer for all its links (started with the first).
    let timer: NodeJS.Timeout | undefined;
    let deadline: Promise<null> | undefined;
    try {
      while (!this.stopping && !r.reason && links.length < MAX_CHAIN_LINKS) {
        const next = nextLink(plan, prev, outputs, hasInputs, this.traits);
        if (!next) break;
        deadline ??= new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), this.chainMs)));
        // Dispatched here, ready since the step before it finished.
        recordDispatch(next.tenantId, (links.at(-1)?.completion ?? head).finishedAt ?? new Date(), new Date());
        const link: Running = { work: next, ac: new AbortController(), reason: null };
        r.link = link;
        const result = this.execute(link);
        const c = await Promise.race([result, deadline]);
        r.link = undefined;
        if (c === null || c.outcome.status !== 'succeeded' || link.reason) return { links, ahead: { link, result } };
        links.push({ completion: c, plugin: next.plugin, config: next.config, traceparent: next.traceparent });
        prev = next;
        outputs = c.outcome.outputs;
      }
    } finally {
      clearTimeout(timer);
    }
    return links.length > 0 ? { links } : null;
  }

  /**
   * Commits a chain (ordo_engine_chain) from `r`, whose slot it held: the step ahead, dispatched to
   * this worker, goes on in that slot as its attempt; the steps after the chain join the local
   * queue. A chain the database refuses is dropped, the step ahead stopped, and `head` reported
   * alone: the chain's steps then run again from the queue (they had no effect but their results).
   */
  private async commitChain(r: Running, head: Completion, chain: Chain): Promise<void> {
    const ahead = chain.ahead?.link.work;
    const t0 = PROFILE ? performance.now() : 0;
    let claimed: ClaimedWork[] | null = null;
    try {
      claimed = await this.store.chain(
        head,
        chain.links,
        this.claimOptions(1),
        ahead && { stepId: ahead.stepId, traceparent: ahead.traceparent },
      );
    } catch (e) {
      this.log.warn({ err: e, runId: head.runId }, 'chain not applied; its first result goes alone');
    }
    if (PROFILE) prof(claimed ? `chain of ${chain.links.length + 1}` : 'chain refused', performance.now() - t0);
    this.running.delete(stepKey(r.work));
    if (claimed === null) {
      if (chain.ahead) this.stop(chain.ahead.link, 'superseded');
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
    } else if (chain.ahead) this.stop(chain.ahead.link, 'superseded');
    this.local.push(...claimed.filter((w) => w !== adopted));
    this.pump();
    this.signal();
  }

  /** Loads the plan of `w`'s DAG version for chains, unless it is kept or loading. */
  private wantPlan(w: ClaimedWork): void {
    if (this.chainMs <= 0) return;
    const key = planKey(w);
    if (this.plans.has(key)) return;
    if (this.plans.size >= MAX_PLANS) this.plans.delete(this.plans.keys().next().value!);
    this.plans.set(
      key,
      this.store.dagDefinition(w.tenantId, w.dagId, w.dagVersion).then(
        (def) => {
          if (def === null) this.plans.delete(key);
          else this.plans.set(key, chainPlan(def));
        },
        (e: unknown) => {
          this.plans.delete(key);
          this.log.warn({ err: e, dagId: w.dagId, version: w.dagVersion }, 'DAG plan not loaded; no chain for now');
        },
      ),
    );
  }

  private stop(r: Running, reason: StopReason): void {
    if (r.link) this.stop(r.link, reason);
    if (r.reason) return;
    r.reason = reason;
    r.ac.abort(reason);
    r.aborted?.();
  }

  private async execute(r: Running): Promise<Completion> {
    const w = r.work;
    const logs: StepLogLine[] = [];
    // Replaced by a redactor of the secret values injected into this attempt's config (once resolved).
    const secrets: { redact: (text: string) => string } = { redact: unredacted };
    const redact = (text: string) => secrets.redact(text);
    const timers: NodeJS.Timeout[] = [setTimeout(() => this.stop(r, 'timeout'), w.spec.timeout)];
    const c = w.spec.constraints;
    if (c?.maxAllowedRunTime)
      timers.push(setTimeout(() => this.stop(r, 'max_allowed_run_time'), c.maxAllowedRunTime.after));
    if (c?.maxExpectedRunTime) {
      const m = c.maxExpectedRunTime;
      timers.push(
        setTimeout(() => void this.constraints.breached(w, 'maxExpectedRunTime', m.after, m.actions), m.after),
      );
    }
    const startedAt = new Date();
    let result: PluginResult;
    try {
      const { tenantId: tenant, dagId, runId, stepId, attempt, traceId, traceparent, plugin } = w;
      const attrs = { tenant, dagId, runId, stepId, attempt, traceId, traceparent, plugin };
      result = await withStepSpan(attrs, async (span) => {
        const res = await this.invoke(w, r, logs, secrets, redact);
        span.setStatus(r.reason === 'cancelled' ? 'cancelled' : r.reason ? 'failed' : res.status);
        return res;
      });
    } catch (e) {
      result = fail('PLUGIN_ERROR', redact(e instanceof Error ? e.message : String(e)), false);
    } finally {
      for (const t of timers) clearTimeout(t);
    }
    const finishedAt = new Date();
    const done = (outcome: Completion['outcome']) => completionFor(w, this.workerId, outcome, startedAt, finishedAt);
    recordStepFinished(w.tenantId, r.reason ? 'aborted' : result.status, startedAt, finishedAt);
    const lines =
      logs.length === 0 && !result.logs?.length
        ? []
        : [...logs, ...(result.logs ?? [])].slice(0, MAX_LOG_LINES).map((l) => ({ ...l, message: redact(l.message) }));
    switch (r.reason) {
      case 'cancelled':
      case 'lease_lost':
      case 'shutdown':
      case 'superseded':
        return done({ status: 'aborted', logs: lines });
      case 'timeout':
        return done({
          status: 'failed',
          error: { code: 'TIMEOUT', message: `step exceeded its timeout of ${w.spec.timeout} ms`, retryable: true },
          logs: lines,
        });
      case 'max_allowed_run_time': {
        const m = c!.maxAllowedRunTime!;
        await this.constraints.breached(w, 'maxAllowedRunTime', m.after, m.actions).catch(() => undefined);
        return done({
          status: 'failed',
          error: {
            code: 'MAX_ALLOWED_RUN_TIME',
            message: `step ran longer than ${m.after} ms and was stopped`,
            retryable: false,
          },
          logs: lines,
        });
      }
      case null:
        break;
    }
    if (result.status === 'succeeded')
      // Outputs are stored and passed downstream: a secret value a plugin echoed back does not survive into them.
      return done({
        status: 'succeeded',
        outputs:
          secrets.redact === unredacted
            ? result.outputs
            : (JSON.parse(redact(JSON.stringify(result.outputs))) as JsonObject),
        logs: lines,
      });
    return done({ status: 'failed', error: { ...result.error, message: redact(result.error.message) }, logs: lines });
  }

  private async invoke(
    w: ClaimedWork,
    r: Running,
    logs: StepLogLine[],
    secrets: { redact: (text: string) => string },
    redact: (t: string) => string,
  ): Promise<PluginResult> {
    const plugin = this.plugins.get(w.plugin);
    if (!plugin) return fail('PLUGIN_NOT_FOUND', `no plugin named ${w.plugin}`, false);
    let config: unknown = w.config;
    if (JSON.stringify(w.config).includes('${{')) {
      try {
        const names = templateRefs(w.config)
          .filter((ref) => ref.kind === 'secrets')
          .map((ref) => ref.path[0]);
        const values = names.length > 0 ? await this.secrets.resolve(w.tenantId, names) : {};
        const rendered = renderTemplate(w.config, { inputs: w.inputs, steps: w.upstream, secrets: values });
        secrets.redact = makeRedactor(rendered.usedSecrets.map((n) => values[n]));
        config = rendered.value;
      } catch (e) {
        if (e instanceof TemplateError || e instanceof SecretNotFoundError) return fail(e.code, e.message, false);
        throw e;
      }
    }
    const parsed = plugin.configSchema.safeParse(config);
    if (!parsed.success)
      return fail(
        'CONFIG_INVALID',
        redact(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')),
        false,
      );
    const ctx: PluginContext = {
      tenantId: w.tenantId,
      dagId: w.dagId,
      dagVersion: w.dagVersion,
      runId: w.runId,
      stepId: w.stepId,
      attempt: w.attempt,
      traceparent: w.traceparent,
      signal: r.ac.signal,
      egress: w.spec.egress,
      sandbox: this.sandbox,
      timeoutMs: w.spec.timeout,
      inputs: w.inputs,
      steps: w.upstream,
      log: (level, message) => {
        if (logs.length < MAX_LOG_LINES) logs.push({ ts: new Date().toISOString(), level, message: redact(message) });
      },
      redact,
    };
    // A call that can reach another system is a child span, whose traceparent its outbound calls
    // carry; one that reaches nothing (a side-effect-free plugin with no egress) runs in the step's span.
    if (plugin.sideEffectFree && w.spec.egress.length === 0)
      return this.call(r, () => plugin.execute(parsed.data, ctx));
    return withChildSpan('orchestrator.plugin', { plugin: w.plugin }, () =>
      this.call(r, () => plugin.execute(parsed.data, { ...ctx, traceparent: currentTraceparent() ?? ctx.traceparent })),
    );
  }

  /**
   * A plugin call that settles when the plugin does or when its step is stopped, whichever comes
   * first: a plugin that ignores its abort signal does not hold the slot.
   */
  private call(r: Running, execute: () => Promise<PluginResult>): Promise<PluginResult> {
    return new Promise<PluginResult>((resolve, reject) => {
      const abort = () => resolve(fail('ABORTED', 'aborted', true));
      if (r.reason) return abort();
      r.aborted = abort;
      execute().then(resolve, reject);
    });
  }

  /** Extends the leases of every running step in one statement; steps whose lease was lost are stopped. */
  private async heartbeat(): Promise<void> {
    if (this.running.size === 0 && this.local.length === 0) return;
    const items = [...this.running.values().map((r) => r.work), ...this.local].map((w) => ({
      tenantId: w.tenantId,
      runId: w.runId,
      stepId: w.stepId,
      epoch: w.epoch,
    }));
    try {
      const held = new Set(
        (await this.store.heartbeat(this.workerId, items, this.leaseMs)).map(
          (k) => `${k.tenantId}/${k.runId}/${k.stepId}`,
        ),
      );
      const asked = new Set(items.map((i) => `${i.tenantId}/${i.runId}/${i.stepId}`));
      for (const [key, r] of this.running.entries()) if (asked.has(key) && !held.has(key)) this.stop(r, 'lease_lost');
      const lost = this.local.filter(
        (w) => asked.has(`${w.tenantId}/${w.runId}/${w.stepId}`) && !held.has(`${w.tenantId}/${w.runId}/${w.stepId}`),
      );
      if (lost.length > 0) {
        this.local = this.local.filter((w) => !lost.includes(w));
        for (const w of lost) this.completions.push(abortedCompletion(w, this.workerId));
        this.signal();
      }
    } catch (e) {
      this.log.warn({ err: e }, 'heartbeat failed');
    }
  }
}

/** The redactor of an attempt that was given no secret. */
const unredacted = (text: string): string => text;

const stepKey = (w: ClaimedWork) => `${w.tenantId}/${w.runId}/${w.stepId}`;
const planKey = (w: ClaimedWork) => `${w.tenantId}/${w.dagId}/${w.dagVersion}`;

function abortedCompletion(w: ClaimedWork, workerId: string): Completion {
  return completionFor(w, workerId, { status: 'aborted', logs: [] });
}

function fail(code: string, message: string, retryable: boolean): PluginResult {
  const error: PluginError = { code, message, retryable };
  return { status: 'failed', error, outputs: {} };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
