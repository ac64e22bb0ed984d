import WebSocket from 'ws';

/** A worker's credentials as a test holds them. */
export interface WorkerAs {
  token: string;
  tenantId: string;
}

/** A worker channel a test opened: every message it receives lands in `inbox`. */
export interface TestChannel {
  ws: WebSocket;
  inbox: Record<string, unknown>[];
  /** Resolves with the close code once the channel closed. */
  closed: Promise<number>;
}

/**
 * Opens worker `workerId`'s channel on the api process at `baseUrl` (`autoPong: false`: a worker
 * that answers no ping).
 */
export async function openChannel(
  baseUrl: string,
  w: WorkerAs,
  workerId: string,
  opts: { autoPong?: boolean } = {},
): Promise<TestChannel> {
  const ws = new WebSocket(`${baseUrl.replace('http', 'ws')}/api/v1/workers/${workerId}/channel`, {
    headers: { authorization: `Bearer ${w.token}`, 'x-tenant-id': w.tenantId },
    ...opts,
  });
  const inbox: Record<string, unknown>[] = [];
  ws.on('message', (d) => inbox.push(JSON.parse((d as Buffer).toString('utf8')) as Record<string, unknown>));
  const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  return { ws, inbox, closed };
}

/** The tasks offered on the channel so far, in order. */
export function offeredTasks<T = { attemptId: string; runId: string; epoch: number; attempt: number }>(
  c: TestChannel,
): T[] {
  return c.inbox.filter((m) => m.type === 'task').map((m) => m.task as T);
}

/**
 * The HTTP status a channel upgrade for `workerId` gets with `w`'s credentials: 101 when it opens
 * (then closed), else the refusal's status.
 */
export function upgradeStatus(baseUrl: string, w: WorkerAs, workerId: string): Promise<number> {
  return new Promise<number>((resolve) => {
    const ws = new WebSocket(`${baseUrl.replace('http', 'ws')}/api/v1/workers/${workerId}/channel`, {
      headers: { authorization: `Bearer ${w.token}`, 'x-tenant-id': w.tenantId },
    });
    ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    ws.on('open', () => {
      ws.close();
      resolve(101);
    });
  });
}
