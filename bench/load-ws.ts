import WebSocket from 'ws';
import {
  pgClient,
  authHeaders,
  cpuMs,
  chainDag,
  freshDatabase,
  load1,
  log,
  machine,
  Processes,
  publishDag,
  round,
  rssMiB,
  sleep,
  stats,
  writeResult,
  type LoadOptions,
  type Stats,
} from './support-load';

export interface WsOptions extends LoadOptions {
  clients: number;
  runs: number;
  /** Pause between run creations (0: all at once). */
  runIntervalMs: number;
}

export interface WsResult {
  scenario: 'load-ws';
  clients: number;
  clientsConnected: number;
  connectSeconds: number;
  runs: number;
  runIntervalMs: number;
  eventsPerRun: number;
  /** Messages received per second, first run created → last subscriber complete. */
  messagesPerS: number;
  /** CPU over the same span: the api process (fan-out) and this process (1,000 clients parsing). */
  cpuMs: { api: number; subscribers: number };
  delivered: number;
  expected: number;
  deliveredRatio: number;
  clientsComplete: number;
  duplicates: number;
  closedEarly: number;
  /** Event's created_at (database clock, same machine) → message received by the subscriber. */
  deliveryLatencyMs: Stats;
  apiRssMiB: { beforeClients: number | null; afterConnect: number | null; max: number };
  loadavg1: [number, number];
  machine: Record<string, unknown>;
  postgresEmbedded: boolean;
}

interface Subscriber {
  ws: WebSocket;
  seen: Set<string>;
  duplicates: number;
  closed: boolean;
}

interface EventMessage {
  type: string;
  runId?: string;
  seq?: number;
  timestamp?: string;
}

/**
 * 1,000 WebSocket subscribers (header auth, one subscription `{dagId}` each) on an api-only
 * process while a worker,scheduler process runs `runs` 3-step chains: every subscriber must
 * receive every stored event of those runs. Reports delivered/expected, delivery latency p50/p99
 * and the api process's RSS.
 */
export async function runWs(opts: WsOptions): Promise<WsResult> {
  const db = await freshDatabase(opts.serverUrl, 'load_ws');
  const procs = new Processes(db);
  const owner = pgClient(db.ownerUrl);
  const subs: Subscriber[] = [];
  try {
    const api = await procs.start('api');
    let lastMessage = 0;
    await procs.start('worker,scheduler');
    const creds = procs.credentials();
    await publishDag(api.url, creds, chainDag('ws', 3));
    await owner.connect();
    const runIds = new Set<string>();
    const latencies: number[] = [];
    const wsUrl = `${api.url.replace(/^http/, 'ws')}/api/v1/stream`;
    const headers = { authorization: `Bearer ${creds.adminToken}`, 'x-tenant-id': creds.tenantId };
    await sleep(500);
    const rssBefore = rssMiB(api.pid);

    const connect = () =>
      new Promise<Subscriber>((resolve, reject) => {
        const ws = new WebSocket(wsUrl, { headers });
        const sub: Subscriber = { ws, seen: new Set(), duplicates: 0, closed: false };
        const timer = setTimeout(() => reject(new Error('subscribe timed out')), 30_000);
        ws.on('open', () => ws.send(JSON.stringify({ type: 'subscribe', id: 's1', filter: { dagId: 'ws' } })));
        ws.on('message', (data: Buffer) => {
          const m = JSON.parse(data.toString()) as EventMessage;
          if (m.type === 'subscribed') {
            clearTimeout(timer);
            resolve(sub);
          } else if (m.type === 'event' && m.runId) {
            // The database is fresh: every event of DAG `ws` belongs to this scenario's runs.
            const key = `${m.runId} ${m.seq}`;
            if (sub.seen.has(key)) sub.duplicates++;
            else sub.seen.add(key);
            lastMessage = Date.now();
            latencies.push(lastMessage - Date.parse(m.timestamp!));
          }
        });
        ws.on('close', () => (sub.closed = true));
        ws.on('error', (e) => {
          clearTimeout(timer);
          reject(e);
        });
      });
    const c0 = performance.now();
    for (let i = 0; i < opts.clients; i += 100) {
      subs.push(...(await Promise.all(Array.from({ length: Math.min(100, opts.clients - i) }, connect))));
    }
    const connectSeconds = round((performance.now() - c0) / 1000);
    await sleep(1000);
    const rssConnected = rssMiB(api.pid);
    log(`load-ws: ${subs.length} subscribers in ${connectSeconds} s; api RSS ${rssConnected} MiB`);

    let rssMax = rssConnected ?? 0;
    const sampler = setInterval(() => (rssMax = Math.max(rssMax, rssMiB(api.pid) ?? 0)), 500);
    const l0 = load1();
    const apiCpu0 = cpuMs(api.pid);
    const cpu0 = process.cpuUsage();
    const t0 = Date.now();
    await Promise.all(
      Array.from({ length: opts.runs }, async (_, k) => {
        await sleep(k * opts.runIntervalMs);
        const r = await fetch(`${api.url}/api/v1/runs`, {
          method: 'POST',
          headers: authHeaders(creds),
          body: JSON.stringify({ dagId: 'ws', inputs: {}, runToken: `ws-${k}` }),
        });
        if (r.status !== 201) throw new Error(`create run: ${r.status} ${await r.text()}`);
        const { runId } = (await r.json()) as { runId: string };
        runIds.add(runId);
      }),
    );
    const ids = [...runIds];
    const deadline = Date.now() + 120_000;
    for (;;) {
      const open = (
        await owner.query<{ n: number }>(
          `select count(*)::int n from run where run_id = any($1::uuid[]) and status not in ('succeeded', 'failed', 'cancelled')`,
          [ids],
        )
      ).rows[0].n;
      if (open === 0) break;
      if (Date.now() > deadline) throw new Error(`load-ws: ${open} runs did not finish`);
      await sleep(200);
    }
    const perRun = (
      await owner.query<{ n: number }>(`select count(*)::int n from run_event where run_id = any($1::uuid[])`, [ids])
    ).rows[0].n;
    const complete = () => subs.filter((s) => s.seen.size >= perRun).length;
    const waitUntil = Date.now() + 30_000;
    while (complete() < subs.length && Date.now() < waitUntil) await sleep(100);
    clearInterval(sampler);
    const apiCpu = cpuMs(api.pid) - apiCpu0;
    const cpu = process.cpuUsage(cpu0);
    const delivered = subs.reduce((a, s) => a + s.seen.size, 0);
    const expected = perRun * subs.length;
    const result: WsResult = {
      scenario: 'load-ws',
      clients: opts.clients,
      clientsConnected: subs.length,
      connectSeconds,
      runs: ids.length,
      runIntervalMs: opts.runIntervalMs,
      messagesPerS: 0,
      cpuMs: { api: apiCpu, subscribers: Math.round((cpu.user + cpu.system) / 1000) },
      eventsPerRun: round(perRun / ids.length),
      delivered,
      expected,
      deliveredRatio: round(delivered / Math.max(1, expected), 4),
      clientsComplete: complete(),
      duplicates: subs.reduce((a, s) => a + s.duplicates, 0),
      closedEarly: subs.filter((s) => s.closed).length,
      deliveryLatencyMs: stats(latencies),
      apiRssMiB: { beforeClients: rssBefore, afterConnect: rssConnected, max: rssMax },
      loadavg1: [l0, load1()],
      machine: machine(),
      postgresEmbedded: db.embedded,
    };
    result.messagesPerS = Math.round(delivered / Math.max(0.001, (lastMessage - t0) / 1000));
    log(
      `load-ws: delivered ${delivered}/${expected}, latency p50 ${result.deliveryLatencyMs.p50} ms p99 ${result.deliveryLatencyMs.p99} ms, api RSS max ${rssMax} MiB`,
    );
    return result;
  } finally {
    for (const s of subs) s.ws.terminate();
    await owner.end().catch(() => undefined);
    await procs.stopAll();
    await db.close();
  }
}

export function wsRow(r: WsResult): string[] {
  return [
    `${r.clientsConnected} WebSocket subscribers × every event of ${r.runs} runs (one per ${r.runIntervalMs} ms)`,
    `delivered ${r.delivered}/${r.expected} (×${r.deliveredRatio}), duplicates ${r.duplicates}; latency p50 / p99 ${r.deliveryLatencyMs.p50} / ${r.deliveryLatencyMs.p99} ms; ${r.messagesPerS} msg/s; api RSS ${r.apiRssMiB.beforeClients} → ${r.apiRssMiB.max} MiB`,
    'every event to every subscriber',
    `${r.loadavg1[0]} → ${r.loadavg1[1]}`,
  ];
}

export const writeWs = (outDir: string, r: WsResult) => writeResult(outDir, 'load-ws', r);
