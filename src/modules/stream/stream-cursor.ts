/**
 * The stream cursor: the position of an event in its tenant's total order, (inserting transaction
 * id, stream_id), written `<xid>-<id>`. Events are delivered in this order and only once every
 * transaction that could still add an earlier one has ended, so resuming after a cursor misses nothing.
 */
export interface Cursor {
  xid: bigint;
  id: bigint;
}

const CURSOR = /^(\d{1,20})-(\d{1,19})$/;

export const START: Cursor = { xid: 0n, id: 0n };

export function parseCursor(s: string): Cursor | undefined {
  const m = CURSOR.exec(s);
  if (!m) return undefined;
  const c = { xid: BigInt(m[1]), id: BigInt(m[2]) };
  if (c.xid >= 1n << 64n || c.id >= 1n << 63n) return undefined;
  return c;
}

export function formatCursor(c: Cursor): string {
  return `${c.xid}-${c.id}`;
}

export function compareCursor(a: Cursor, b: Cursor): number {
  if (a.xid !== b.xid) return a.xid < b.xid ? -1 : 1;
  if (a.id !== b.id) return a.id < b.id ? -1 : 1;
  return 0;
}
