import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * How much of what a client still sends is read (and discarded) before an early answer is sent or
 * its connection closed: closing a socket with unread input makes TCP answer with a reset, and a
 * reset can make the client's side discard the answer before the client reads it. Past either
 * bound the connection is closed regardless.
 */
export interface LingerBounds {
  maxBytes: number;
  maxMs: number;
}

export const LINGER: LingerBounds = { maxBytes: 16 * 1024 * 1024, maxMs: 10_000 };

const chunkBytes = (c: Buffer | string): number => (typeof c === 'string' ? Buffer.byteLength(c) : c.length);

/**
 * Resolves once the rest of a request's body has been read and discarded: when the request is
 * complete, the client is gone, or a bound is reached. A refusal sent after it (413 with
 * `Connection: close`) then closes a connection with nothing left unread.
 */
export function drainRequest(req: IncomingMessage, bounds: LingerBounds = LINGER): Promise<void> {
  if (req.complete || req.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let read = 0;
    const done = () => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', done);
      req.off('close', done);
      req.off('error', done);
      resolve();
    };
    const onData = (c: Buffer | string) => {
      read += chunkBytes(c);
      if (read > bounds.maxBytes) done();
    };
    const timer = setTimeout(done, bounds.maxMs);
    req.on('data', onData);
    req.once('end', done);
    req.once('close', done);
    req.once('error', done);
    req.resume();
  });
}

/**
 * Ends a connection after what was written to it, reading and discarding what the client still
 * sends until the client closes its side or a bound is reached, then destroys the socket.
 */
export function lingeringClose(socket: Duplex, bounds: LingerBounds = LINGER): void {
  let read = 0;
  const timer = setTimeout(() => socket.destroy(), bounds.maxMs);
  timer.unref();
  socket.on('data', (c: Buffer | string) => {
    read += chunkBytes(c);
    if (read > bounds.maxBytes) socket.destroy();
  });
  socket.once('end', () => socket.destroy());
  socket.once('close', () => clearTimeout(timer));
  socket.end();
  socket.resume();
}
