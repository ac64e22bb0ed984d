import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';

/** The HTTP answer to a WebSocket upgrade that was refused. */
export interface Refusal {
  status: number;
  contentType: string | undefined;
  /** The body parsed as JSON, or its text when it is not JSON. */
  body: { error?: { code?: string; message?: string; traceId?: string } } | string;
}

/** Attempts an upgrade that must be refused (rejects if it opens); resolves with the HTTP answer. */
export function refusal(url: string, headers: Record<string, string> = {}): Promise<Refusal> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => {
      ws.terminate();
      reject(new Error('the upgrade was accepted'));
    });
    ws.once('unexpected-response', (_req, res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: Refusal['body'];
        try {
          body = JSON.parse(text) as Refusal['body'];
        } catch {
          body = text;
        }
        resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], body });
      });
    });
    ws.once('error', (e) => reject(e));
  });
}
