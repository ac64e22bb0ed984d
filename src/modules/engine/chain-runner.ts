import { recordDispatch } from '../../core/telemetry/metrics';
import { chainPlan, nextLink, type ChainPlan, type ChainPlugins } from './chain';
import type { ChainLink, ClaimedWork, Completion } from './engine.store';
import { runningStep, type RunningStep } from './running-step';

/** Steps a chain runs after its first before it commits. */
const MAX_CHAIN_LINKS = 32;
/** DAG versions whose plans are kept for chains. */
const MAX_PLANS = 1_000;

/** The steps a chain ran after its first, and the one it still runs (or that did not succeed). */
export interface Chain {
  links: ChainLink[];
  ahead?: { link: RunningStep; result: Promise<Completion> };
}

export interface ChainRunnerOptions {
  /** How long a chain may hold its first result before it commits (0: no chains). */
  chainMs: number;
  traits: ChainPlugins;
  /** The definition of a DAG version, as published (versions never change). */
  dagDefinition(tenantId: string, dagId: string, version: number): Promise<unknown>;
  /** Runs a step to its result (StepExecutor). */
  execute(r: RunningStep): Promise<Completion>;
  /** The worker is shutting down: no further link starts. */
  stopping(): boolean;
  log: { warn(obj: object, msg: string): void };
}

/**
 * Runs the steps of a linear chain after one that succeeded, before its result commits (see
 * chain.ts for which steps qualify), with the DAG versions' plans it loads and keeps.
 */
export class ChainRunner {
  /** DAG versions' plans by tenant, DAG and version (or their load under way). */
  private readonly plans = new Map<string, ChainPlan | Promise<void>>();

  constructor(private readonly o: ChainRunnerOptions) {}

  /**
   * After `r`'s step succeeded: runs the steps that follow it in a chain (nextLink: each the only
   * dependent of the one before, side-effect free) one after the other, before its result commits,
   * for up to the chain's time (ORDO_WORKER_CHAIN_MS). A step that does not finish in that time, or does not succeed,
   * is the chain's step ahead: the chain commits without it and the step is dispatched to this
   * worker, which reports its result as that attempt's. Null when no step follows.
   */
  async follow(r: RunningStep, head: Completion): Promise<Chain | null> {
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
      while (!this.o.stopping() && !r.reason && links.length < MAX_CHAIN_LINKS) {
        const next = nextLink(plan, prev, outputs, hasInputs, this.o.traits);
        if (!next) break;
        deadline ??= new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), this.o.chainMs)));
        // Dispatched here, ready since the step before it finished.
        recordDispatch(next.tenantId, (links.at(-1)?.completion ?? head).finishedAt ?? new Date(), new Date());
        const link = runningStep(next);
        r.link = link;
        const result = this.o.execute(link);
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

  /** Loads the plan of `w`'s DAG version for chains, unless it is kept or loading. */
  want(w: ClaimedWork): void {
    if (this.o.chainMs <= 0) return;
    const key = planKey(w);
    if (this.plans.has(key)) return;
    if (this.plans.size >= MAX_PLANS) this.plans.delete(this.plans.keys().next().value!);
    this.plans.set(
      key,
      this.o.dagDefinition(w.tenantId, w.dagId, w.dagVersion).then(
        (def) => {
          if (def === null) this.plans.delete(key);
          else this.plans.set(key, chainPlan(def));
        },
        (e: unknown) => {
          this.plans.delete(key);
          this.o.log.warn({ err: e, dagId: w.dagId, version: w.dagVersion }, 'DAG plan not loaded; no chain for now');
        },
      ),
    );
  }
}

const planKey = (w: ClaimedWork) => `${w.tenantId}/${w.dagId}/${w.dagVersion}`;
