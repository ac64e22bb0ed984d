import type pg from 'pg';
import type { RunsService } from '../src/modules/runs/runs.service';
import { round, stats, type Stats } from './support-load';

/**
 * Fair share under plans: two tenants whose plans give them weights 3 and 1 both keep a backlog of
 * one-step runs queued, sized 3:1 so that both stay saturated for the whole window; the steps each
 * gets claimed in the window give the measured share. Meanwhile a quiet tenant without a plan
 * creates a run every 100 ms: its claim latency, against the same measurement with the engine idle
 * just before, shows what the weighted tenants cost it. The control measures it a third time while
 * a load that is not Ordo's (bench/control-load.ts) keeps the machine about as busy as the weighted
 * tenants did: what the host alone does to it under such a load.
 */
export interface WeightsContext {
  owner: pg.Client;
  runs: RunsService;
  /** Waits until the runs have ended (the engine's announcements); false past the deadline. */
  waitAll: (ids: string[], timeoutMs: number) => Promise<boolean>;
  /** Waits until the server is quiet after a drain (autovacuum). */
  settle: () => Promise<void>;
  log: (m: string) => void;
  nextToken: () => number;
  /** The machine's busy share (per cent of its cores) from now until the function it gives is called. */
  busy: () => () => number;
  /** Starts the control load; the function it gives stops it (and answers its transactions). Null: no control. */
  control: (() => Promise<() => Promise<number>>) | null;
}

export interface WeightsResult {
  weights: [number, number];
  backlog: [number, number];
  windowSeconds: number;
  claimed: [number, number];
  /** The heavy tenant's share of the claims in the window, and the share its weight gives. */
  share: number;
  expectedShare: number;
  /** The measured share over the expected one, less one (e.g. 0.04: 4 % above). */
  shareError: number;
  bothSaturated: boolean;
  stepsPerS: number;
  quietIdleClaimMs: Stats;
  quietLoadedClaimMs: Stats;
  p99Ratio: number | null;
  /** The machine's busy share (%) while the quiet tenant was measured under the weighted tenants. */
  loadedBusyPct: number;
  /** The quiet tenant under the control load instead, with the machine's busy share meanwhile. */
  control: { quietClaimMs: Stats; busyPct: number; p99Ratio: number | null } | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runWeights(ctx: WeightsContext, heavyBacklog: number, quietRuns: number): Promise<WeightsResult> {
  const { owner, runs, log } = ctx;
  const weights: [number, number] = [3, 1];
  const backlog: [number, number] = [heavyBacklog, Math.round((heavyBacklog * weights[1]) / weights[0])];
  const tenants = ['heavy', 'light'] as const;
  // The plans, through the same path an operator's change takes to the engine.
  for (const [i, t] of tenants.entries()) {
    await owner.query(`insert into plan (id, limits) values ($1, $2)`, [`bench-${t}`, { weight: weights[i] }]);
    await owner.query(`insert into tenant_plan (tenant_id, plan_id) values ($1, $2)`, [t, `bench-${t}`]);
  }
  await owner.query(`select ordo_plan_sync(array['heavy', 'light'])`);

  /** `quietRuns` runs of the quiet tenant, 100 ms apart: each one's creation → claim, in ms. */
  const quiet = async (label: string): Promise<number[]> => {
    const ids: string[] = [];
    for (let k = 0; k < quietRuns; k++) {
      const r = await runs.createRun('quiet', {
        dagId: 'one',
        inputs: {},
        runToken: `w-${label}-${k}-${ctx.nextToken()}`,
        requestedBy: 'bench',
      });
      ids.push(r.runId);
      await sleep(100);
    }
    await ctx.waitAll(ids, 120_000);
    const { rows } = await owner.query<{ ms: number }>(
      `select extract(epoch from (a.claimed_at - r.created_at)) * 1000 as ms from attempt a
       join run r on r.tenant_id = a.tenant_id and r.run_id = a.run_id where a.tenant_id = 'quiet' and a.run_id = any($1::uuid[])`,
      [ids],
    );
    return rows.map((r) => Number(r.ms));
  };

  await ctx.settle();
  const idle = await quiet('idle');
  log(`weights: queueing ${backlog[0]} + ${backlog[1]} steps for tenants heavy and light (weights 3:1)`);
  const ids: string[] = [];
  for (const [i, t] of tenants.entries()) {
    for (let k = 0; k < backlog[i]; k += 5000) {
      const chunk = Array.from({ length: Math.min(5000, backlog[i] - k) }, (_, j) => ({
        dagId: 'one',
        inputs: {},
        runToken: `${t}-${k + j}-${ctx.nextToken()}`,
        requestedBy: 'bench',
      }));
      ids.push(...(await runs.createRuns(t, chunk)).map((r) => r.runId));
    }
  }
  // The window opens once both tenants are being served, and closes after the quiet measurement.
  await sleep(1000);
  const { rows: w0 } = await owner.query<{ at: Date }>(`select clock_timestamp() as at`);
  const loadedBusy = ctx.busy();
  const loaded = await quiet('loaded');
  const loadedBusyPct = loadedBusy();
  const { rows: w1 } = await owner.query<{ at: Date }>(`select clock_timestamp() as at`);
  const { rows: left } = await owner.query<{ tenant_id: string; n: number }>(
    `select tenant_id, count(*)::int as n from queue_item where tenant_id in ('heavy', 'light') and state = 'ready' group by 1`,
  );
  const { rows: claimedRows } = await owner.query<{ tenant_id: string; n: number }>(
    `select tenant_id, count(*)::int as n from attempt
     where tenant_id in ('heavy', 'light') and claimed_at >= $1 and claimed_at < $2 group by 1`,
    [w0[0].at, w1[0].at],
  );
  const claimed: [number, number] = [
    claimedRows.find((r) => r.tenant_id === 'heavy')?.n ?? 0,
    claimedRows.find((r) => r.tenant_id === 'light')?.n ?? 0,
  ];
  const bothSaturated = tenants.every((t) => (left.find((r) => r.tenant_id === t)?.n ?? 0) > 0);
  const windowSeconds = (w1[0].at.getTime() - w0[0].at.getTime()) / 1000;
  log('weights: draining');
  await ctx.waitAll(ids, 600_000);
  let control: WeightsResult['control'] = null;
  if (ctx.control) {
    await ctx.settle();
    const stop = await ctx.control();
    await sleep(1000);
    const controlBusy = ctx.busy();
    const c = stats(await quiet('control'));
    const busyPct = controlBusy();
    await stop();
    control = { quietClaimMs: c, busyPct, p99Ratio: null };
  }
  const expectedShare = weights[0] / (weights[0] + weights[1]);
  const share = claimed[0] / Math.max(1, claimed[0] + claimed[1]);
  const [i, l] = [stats(idle), stats(loaded)];
  return {
    weights,
    backlog,
    windowSeconds: round(windowSeconds),
    claimed,
    share: round(share, 4),
    expectedShare,
    shareError: round(share / expectedShare - 1, 4),
    bothSaturated,
    stepsPerS: Math.round((claimed[0] + claimed[1]) / windowSeconds),
    quietIdleClaimMs: i,
    quietLoadedClaimMs: l,
    p99Ratio: i.p99 && l.p99 ? round(l.p99 / i.p99) : null,
    loadedBusyPct,
    control: control && {
      ...control,
      p99Ratio: i.p99 && control.quietClaimMs.p99 ? round(control.quietClaimMs.p99 / i.p99) : null,
    },
  };
}
