import { Readable } from 'node:stream';
import type { RunListQuery } from './runs.dto';
import type { RunsService } from './runs.service';

export const NDJSON = 'application/x-ndjson';

/** Runs read per page (each page is one short tenant transaction) while a stream is written. */
export const STREAM_PAGE = 500;

/**
 * Whether an Accept header asks for NDJSON rather than JSON: application/x-ndjson must be named
 * (a wildcard alone keeps JSON) with a quality at least that of the most specific range that
 * covers application/json.
 */
export function acceptsNdjson(accept: string | undefined): boolean {
  if (!accept) return false;
  const q: Record<string, number> = {};
  for (const range of accept.split(',')) {
    const [type, ...params] = range.split(';').map((s) => s.trim().toLowerCase());
    const qParam = params.find((p) => p.startsWith('q='));
    const value = qParam === undefined ? 1 : Number(qParam.slice(2));
    if (type && Number.isFinite(value)) q[type] = Math.max(q[type] ?? 0, value);
  }
  const ndjson = q[NDJSON] ?? 0;
  const json = q['application/json'] ?? q['application/*'] ?? q['*/*'] ?? 0;
  return ndjson > 0 && ndjson >= json;
}

/**
 * The runs of the list query as NDJSON: one run a line (the JSON list's items), newest first,
 * read page by page after `pageToken`, so memory stays constant whatever the count. `max`, when
 * given, caps the number of lines. The first page is read before this resolves, so a bad page
 * token is an error response, not a broken stream; a failure on a later page aborts the transfer.
 * Pages are read in separate transactions: the stream is not one snapshot (a run created meanwhile
 * is newer than the cursor and left out).
 */
export async function runsNdjson(
  runs: RunsService,
  tenantId: string,
  q: RunListQuery,
  max?: number,
): Promise<Readable> {
  const page = (left: number, pageToken: string | undefined) =>
    runs.list(tenantId, { ...q, limit: Math.min(left, STREAM_PAGE), pageToken });
  let left = max ?? Infinity;
  let current = await page(left, q.pageToken);
  async function* lines(): AsyncGenerator<string> {
    for (;;) {
      const items = current.items.slice(0, left);
      left -= items.length;
      if (items.length > 0) yield items.map((run) => `${JSON.stringify(run)}\n`).join('');
      if (current.nextPageToken === null || left <= 0) return;
      current = await page(left, current.nextPageToken);
    }
  }
  return Readable.from(lines(), { objectMode: false });
}
