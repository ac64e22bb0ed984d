import type { Socket } from 'node:net';
import WebSocket from 'ws';
import { OrdoApiError } from './errors';
import type { ClientMessage, HeartbeatAnswer, ResultAnswer, ResultBody, ServerMessage, Task } from './protocol';

export interface ChannelHandlers {
  onTask(task: Task): void;
  onCancel(attemptId: string, reason: string): void;
  onHeartbeat(answer: HeartbeatAnswer): void;
  /** An error message the server sent about no particular result. */
  onError(error: OrdoApiError): void;
  /** The connection ended (after it was open) by the server or the network, with the close code. */
  onClose(code: number): void;
}

/** Why a connection could not be opened. */
export class ChannelRefused extends Error {
  override readonly name = 'ChannelRefused';
  constructor(
    /** The HTTP status that answered the upgrade, when one did. */
    readonly status: number | undefined,
    readonly code: string | undefined,
    message: string,
  ) {
    super(message);
  }
}

interface PendingResult {
  resolve(answer: ResultAnswer): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * One WebSocket connection to `/api/v1/workers/{workerId}/channel`. Results sent on it wait for the
 * server's ack (or error) with their attempt id; they fail when the connection closes first, so the
 * caller can post them over HTTP instead.
 */
export class Channel {
  private readonly pending = new Map<string, PendingResult>();
  private closedByUs = false;
  private corked = false;

  private constructor(
    private readonly ws: WebSocket,
    /** The connection, corked while the messages of one turn of the event loop are sent (see send). */
    private readonly socket: Socket | undefined,
    private readonly handlers: ChannelHandlers,
  ) {
    ws.on('message', (data: WebSocket.RawData) => this.receive(data));
    ws.on('close', (code: number) => {
      for (const [id, p] of this.pending) {
        clearTimeout(p.timer);
        p.reject(new Error(`channel closed before the result of ${id} was acknowledged`));
      }
      this.pending.clear();
      if (!this.closedByUs) handlers.onClose(code);
    });
    // Errors after the open are followed by a close, handled above.
    ws.on('error', () => undefined);
  }

  /** Opens the channel; rejects with ChannelRefused when the upgrade is answered otherwise, or the connection fails. */
  static open(
    url: string,
    headers: Record<string, string>,
    handlers: ChannelHandlers,
    timeoutMs: number,
  ): Promise<Channel> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, handshakeTimeout: timeoutMs, perMessageDeflate: false });
      let socket: Socket | undefined;
      ws.once('upgrade', (res) => (socket = res.socket));
      const fail = (e: Error) => {
        ws.removeAllListeners();
        ws.on('error', () => undefined);
        ws.terminate();
        reject(e);
      };
      ws.once('unexpected-response', (_req, res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
          } catch {
            code = undefined;
          }
          fail(new ChannelRefused(res.statusCode, code, `channel upgrade answered ${res.statusCode} ${code ?? ''}`));
        });
        res.on('error', (e) => fail(new ChannelRefused(res.statusCode, undefined, e.message)));
      });
      ws.once('error', (e) => fail(new ChannelRefused(undefined, undefined, e.message)));
      ws.once('open', () => {
        ws.removeAllListeners('unexpected-response');
        ws.removeAllListeners('error');
        resolve(new Channel(ws, socket, handlers));
      });
    });
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /**
   * Sends a message; false when the connection is not open. The messages sent in one turn of the
   * event loop (a result and the credit its slot frees, the results of handlers that ended
   * together) leave in one write: each write to a socket is a system call, which costs more than
   * the frame.
   */
  send(message: ClientMessage): boolean {
    if (!this.isOpen) return false;
    const socket = this.socket;
    if (socket && !this.corked) {
      this.corked = true;
      socket.cork();
      process.nextTick(() => {
        this.corked = false;
        socket.uncork();
      });
    }
    this.ws.send(JSON.stringify(message));
    return true;
  }

  /** Sends a result and waits for its ack; rejects on an error message, a close or the timeout. */
  sendResult(attemptId: string, body: ResultBody, timeoutMs: number): Promise<ResultAnswer> {
    return new Promise((resolve, reject) => {
      if (!this.send({ type: 'result', attemptId, ...body })) {
        reject(new Error('channel is not open'));
        return;
      }
      this.pending.get(attemptId)?.reject(new Error('superseded by another result'));
      const timer = setTimeout(() => {
        this.pending.delete(attemptId);
        reject(new Error(`no ack for the result of ${attemptId} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(attemptId, { resolve, reject, timer });
    });
  }

  close(): void {
    this.closedByUs = true;
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(1000);
  }

  /** Ends the connection at once (no close handshake), as a lost network would. */
  terminate(): void {
    this.ws.terminate();
  }

  private receive(data: WebSocket.RawData): void {
    let msg: ServerMessage;
    try {
      const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
      msg = JSON.parse(buf.toString('utf8'));
    } catch {
      return;
    }
    switch (msg.type) {
      case 'task':
        this.handlers.onTask(msg.task);
        break;
      case 'cancel':
        this.handlers.onCancel(msg.attemptId, msg.reason);
        break;
      case 'heartbeat': {
        const { type: _type, ...answer } = msg;
        this.handlers.onHeartbeat(answer);
        break;
      }
      case 'ack': {
        const { type: _type, attemptId, ...answer } = msg;
        this.settle(attemptId, (p) => p.resolve(answer));
        break;
      }
      case 'error': {
        const error = new OrdoApiError(0, msg.code, msg.message);
        if (msg.attemptId === undefined || !this.settle(msg.attemptId, (p) => p.reject(error))) {
          this.handlers.onError(error);
        }
        break;
      }
      default:
        break;
    }
  }

  private settle(attemptId: string, fn: (p: PendingResult) => void): boolean {
    const p = this.pending.get(attemptId);
    if (!p) return false;
    this.pending.delete(attemptId);
    clearTimeout(p.timer);
    fn(p);
    return true;
  }
}
