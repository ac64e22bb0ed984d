import { EventEmitter } from 'node:events';
import { ApiClient } from './api-client';
import { backoffDelay, DEFAULT_BACKOFF, sleep, type BackoffOptions } from './backoff';
import { OrdoApiError } from './errors';
import type {
  Registration,
  RegisterRequest,
  Resources,
  ResultAnswer,
  ResultBody,
  Task,
  TaskTypeSpec,
} from './protocol';
import { compileSchema, loadJsonSchemaCompiler } from './schema';
import { WorkerSession, type SessionHost, type TransportKind } from './session';
import { TaskExecution, type CompiledHandler, type HandlerDefinition } from './task-execution';
import { SDK_VERSION } from './version';

export interface OrdoWorkerOptions {
  /** Base URLs of Ordo instances (e.g. http://ordo:8080), tried in order; a failing one hands over to the next. */
  urls: string | string[];
  /** A token with the `worker` scope, bound to the pool. */
  token: string;
  tenantId: string;
  name: string;
  /** The pool; the token's pool when omitted. */
  pool?: string;
  /** How tasks arrive: a WebSocket channel (default; long-poll when the channel is unavailable) or long-poll. */
  transport?: TransportKind;
  /** Tasks run at once (default 1). */
  maxConcurrent?: number;
  costPerSecond?: number;
  resources?: Resources;
  models?: string[];
  labels?: Record<string, string>;
  /** The models loaded now, sent with each heartbeat. */
  loaded?: () => string[];
  /** Drains on SIGTERM and SIGINT (a second signal stops at once). */
  handleSignals?: boolean;
  /** Waits between retries of a failed call (default 200 ms doubling up to 10 s, with jitter). */
  backoff?: BackoffOptions;
  /** Tries of one result post before it is given up (default 12). */
  resultTries?: number;
}

export interface WorkerEvents {
  registered: [Registration];
  transport: [TransportKind];
  task: [Task];
  /** A result the server took (the answer says how the step's attempt ended, or that it had it already). */
  result: [{ task: Task; body: ResultBody; answer: ResultAnswer }];
  cancelled: [{ attemptId: string; reason: string }];
  /** A result the server refused for good (STALE_EPOCH, TASK_CANCELLED, TASK_ORPHANED, RESULT_CONFLICT, TASK_NOT_FOUND). */
  refused: [{ task: Task; code: string }];
  /** The server lost the registration (offline past its TTL, or unknown id); the worker registers again. */
  offline: [{ workerId: string; reason: string }];
  warning: [Error];
  /** An error no retry can change; the worker has stopped. Emitted only when listened to. */
  error: [Error];
  stopped: [];
}

type State = 'new' | 'starting' | 'running' | 'draining' | 'stopped';

/**
 * An Ordo external worker: registers its task types, heartbeats, pulls tasks, runs their handlers
 * (at most `maxConcurrent` at once) and posts their results. See docs/workers.md.
 */
export class OrdoWorker extends EventEmitter<WorkerEvents> {
  private readonly client: ApiClient;
  private readonly definitions = new Map<string, HandlerDefinition>();
  private readonly handlers = new Map<string, CompiledHandler>();
  private readonly executions = new Map<string, { execution: TaskExecution; session: WorkerSession }>();
  /** Handlers running now: a slot is free again once its handler ends, while its result is still posted. */
  private handling = 0;
  private readonly lifetime = new AbortController();
  private readonly maxConcurrent: number;
  private session: WorkerSession | undefined;
  private state: State = 'new';
  private idleWaiters: (() => void)[] = [];
  private stoppedWaiters: { resolve(): void; reject(e: Error): void }[] = [];
  private fatal: Error | undefined;
  private readonly signalHandler = () => this.onSignal();
  private signals = 0;

  constructor(private readonly options: OrdoWorkerOptions) {
    super();
    const urls = Array.isArray(options.urls) ? options.urls : [options.urls];
    this.client = new ApiClient({ urls, token: options.token, tenantId: options.tenantId, backoff: options.backoff });
    this.maxConcurrent = options.maxConcurrent ?? 1;
    if (!Number.isInteger(this.maxConcurrent) || this.maxConcurrent < 1) {
      throw new RangeError('maxConcurrent must be a positive integer');
    }
  }

  /** Registers the handler of a task type (before start). */
  handle<I = unknown, O = unknown>(taskType: string, definition: HandlerDefinition<I, O>): this {
    if (this.state !== 'new') throw new Error('handlers are registered before start()');
    if (this.definitions.has(taskType)) throw new Error(`task type ${taskType} already has a handler`);
    this.definitions.set(taskType, definition);
    return this;
  }

  /** The current registration's worker id. */
  get workerId(): string | undefined {
    return this.session?.workerId;
  }

  get transport(): TransportKind | undefined {
    return this.session?.transportKind;
  }

  /** Tasks held now (running, or posting their result). */
  get running(): number {
    return this.executions.size;
  }

  /**
   * Registers (retrying while no server answers), then heartbeats and pulls tasks in the background.
   * Resolves with the registration; with undefined when drain() or stop() (a signal) came first,
   * the worker then stopped without taking a task.
   */
  async start(): Promise<Registration | undefined> {
    if (this.state !== 'new') throw new Error('start() is called once');
    if (this.definitions.size === 0) throw new Error('no task type: call handle() before start()');
    this.state = 'starting';
    // Installed before the first wait, so that finish() (a drain or stop meanwhile) removes them.
    if (this.options.handleSignals) {
      process.on('SIGTERM', this.signalHandler);
      process.on('SIGINT', this.signalHandler);
    }
    try {
      const fromJsonSchema = await loadJsonSchemaCompiler();
      if (this.state !== 'starting') return undefined;
      for (const [name, definition] of this.definitions) {
        this.handlers.set(name, {
          definition,
          input: definition.input !== undefined ? compileSchema(definition.input, 'input', fromJsonSchema) : undefined,
          output:
            definition.output !== undefined ? compileSchema(definition.output, 'output', fromJsonSchema) : undefined,
        });
      }
      const session = await this.register();
      if (this.state !== 'starting') {
        // Drained or stopped while the registration was on its way: it leaves at once.
        await session.leave();
        this.finish();
        return undefined;
      }
      this.state = 'running';
      session.start();
      return session.registration;
    } catch (e) {
      if (this.state !== 'starting') {
        this.finish();
        return undefined;
      }
      this.finish(e as Error);
      throw e;
    }
  }

  /** Stops taking tasks, lets the ones held finish and post their results, then leaves. */
  async drain(): Promise<void> {
    if (this.state === 'stopped') return;
    if (this.state === 'new') return this.finish();
    this.state = 'draining';
    await this.session?.drain();
    await this.idle();
    await this.session?.leave();
    this.finish();
  }

  /** Leaves at once: running handlers are aborted and their tasks retried elsewhere. */
  async stop(): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'draining';
    this.lifetime.abort();
    for (const { execution } of this.executions.values()) execution.cancel('worker stopped');
    await this.session?.leave();
    this.finish();
  }

  /** Resolves when the worker has stopped (drain, stop); rejects when it stopped on an error. */
  wait(): Promise<void> {
    if (this.state === 'stopped') return this.fatal ? Promise.reject(this.fatal) : Promise.resolve();
    return new Promise((resolve, reject) => this.stoppedWaiters.push({ resolve, reject }));
  }

  private finish(error?: Error): void {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    this.fatal = error;
    this.lifetime.abort();
    this.session?.end();
    process.off('SIGTERM', this.signalHandler);
    process.off('SIGINT', this.signalHandler);
    for (const w of this.stoppedWaiters) {
      if (error) w.reject(error);
      else w.resolve();
    }
    this.stoppedWaiters = [];
    this.emit('stopped');
  }

  private onSignal(): void {
    this.signals++;
    void (this.signals === 1 ? this.drain() : this.stop());
  }

  private idle(): Promise<void> {
    if (this.executions.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private registerRequest(): RegisterRequest {
    const o = this.options;
    const taskTypes: TaskTypeSpec[] = [...this.handlers].map(([name, h]) => ({
      name,
      ...(h.input ? { inputSchema: h.input.json } : {}),
      ...(h.output ? { outputSchema: h.output.json } : {}),
    }));
    return {
      name: o.name,
      ...(o.pool !== undefined ? { pool: o.pool } : {}),
      taskTypes,
      ...(o.resources !== undefined ? { resources: o.resources } : {}),
      ...(o.models !== undefined ? { models: o.models } : {}),
      maxConcurrent: this.maxConcurrent,
      ...(o.costPerSecond !== undefined ? { costPerSecond: o.costPerSecond } : {}),
      ...(o.labels !== undefined ? { labels: o.labels } : {}),
      sdkVersion: SDK_VERSION,
    };
  }

  /** POST /api/v1/workers, retried while no server answers; an error answer (401, 400, …) rejects. */
  private async register(): Promise<WorkerSession> {
    const r = await this.client.call<Registration>('POST', '/api/v1/workers', {
      body: this.registerRequest(),
      signal: this.lifetime.signal,
      onRetry: (e) => this.emit('warning', e),
    });
    if (!r.body?.workerId) throw new OrdoApiError(r.status, 'BAD_ANSWER', 'registration answered without a workerId');
    const session = new WorkerSession(r.body, this.sessionHost(), this.options.transport ?? 'websocket');
    this.session = session;
    this.emit('registered', r.body);
    return session;
  }

  private async reregister(): Promise<void> {
    for (let n = 0; this.state === 'running'; n++) {
      try {
        const session = await this.register();
        if (this.state !== 'running') {
          await session.leave();
          return;
        }
        session.start();
        return;
      } catch (e) {
        if (this.lifetime.signal.aborted) return;
        if (e instanceof OrdoApiError && (e.status === 401 || e.status === 403)) return this.onFatal(e);
        this.emit('warning', e as Error);
        await sleep(backoffDelay(n, this.options.backoff ?? DEFAULT_BACKOFF), this.lifetime.signal);
      }
    }
  }

  private onFatal(error: Error): void {
    for (const { execution } of this.executions.values()) execution.cancel('worker stopped');
    if (this.listenerCount('error') > 0) this.emit('error', error);
    this.finish(error);
  }

  private sessionHost(): SessionHost {
    return {
      client: this.client,
      stopSignal: this.lifetime.signal,
      backoff: this.options.backoff,
      resultTries: this.options.resultTries ?? 12,
      // The server assigns a worker no more tasks than maxConcurrent until their results are in, so
      // the slot of a task whose result is on its way can be asked for again.
      capacity: () => (this.state === 'running' ? this.maxConcurrent - this.handling : 0),
      loaded: () => this.options.loaded?.(),
      onTask: (task, session) => this.onTask(task, session),
      holding: (session) => [...this.executions].filter(([, h]) => h.session === session).map(([id]) => id),
      onCancel: (attemptId, reason) => {
        const held = this.executions.get(attemptId);
        if (!held || held.execution.cancelled) return;
        held.execution.cancel(reason);
        this.emit('cancelled', { attemptId, reason });
      },
      onLost: (session, why) => {
        this.emit('offline', { workerId: session.workerId, reason: why });
        // Its tasks went elsewhere: their handlers are aborted and post nothing.
        for (const held of this.executions.values()) {
          if (held.session === session) held.execution.cancel(`worker ${why}`);
        }
        if (this.session === session && this.state === 'running') void this.reregister();
      },
      onFatal: (error) => this.onFatal(error),
      onTransport: (kind) => this.emit('transport', kind),
      onRefused: (task, code) => this.emit('refused', { task, code }),
      onWarning: (error) => this.emit('warning', error),
    };
  }

  private onTask(task: Task, session: WorkerSession): void {
    // The same attempt offered again (e.g. after the channel reconnected) is already running here.
    if (this.executions.has(task.attemptId)) return;
    const execution = new TaskExecution(task, this.handlers.get(task.taskType), (t, percent, message, data) =>
      session.progress(t, percent, message, data),
    );
    this.executions.set(task.attemptId, { execution, session });
    this.handling += 1;
    this.emit('task', task);
    void this.run(execution, session);
  }

  private async run(execution: TaskExecution, session: WorkerSession): Promise<void> {
    const task = execution.task;
    let handled = false;
    const handlerEnded = () => {
      if (handled) return;
      handled = true;
      this.handling -= 1;
      this.session?.capacityChanged();
    };
    try {
      const body = await execution.execute();
      if (body && !execution.cancelled && !session.isEnded) {
        // The result goes first (postResult sends it at once when it can), then the freed slot is asked for.
        const posted = session.postResult(task, body);
        handlerEnded();
        const answer = await posted;
        if (answer) this.emit('result', { task, body, answer });
      }
    } catch (e) {
      this.emit('warning', e as Error);
    } finally {
      this.executions.delete(task.attemptId);
      handlerEnded();
      if (this.executions.size === 0) {
        for (const w of this.idleWaiters.splice(0)) w();
      }
    }
  }
}
