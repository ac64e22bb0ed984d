import { TaskError } from './errors';
import type { JsonObject, LogLevel, ResultBody, Task } from './protocol';
import type { CompiledSchema, SchemaLike } from './schema';

/** What a handler receives beside its input. */
export interface TaskContext {
  /** Aborts when the task is cancelled, the worker loses it (offline) or its deadline passes. */
  signal: AbortSignal;
  attemptId: string;
  attempt: number;
  runId: string;
  stepId: string;
  dagId: string;
  dagVersion: number;
  taskType: string;
  deadline: Date;
  /** W3C trace context of the step, for the handler's own spans. */
  traceparent: string;
  /** Reports progress (0..100) to the run; best effort, never throws. */
  progress(percent?: number, message?: string, data?: JsonObject): void;
  /** A line for the step's logs, posted with the result. */
  log(level: LogLevel, message: string): void;
  /** A named status for the step (the DAG may branch on it), posted with the result. */
  setNamedStatus(name: string): void;
}

/** A task type the worker handles. */
export interface HandlerDefinition<I = unknown, O = unknown> {
  /** Validates the input before `run` (a mismatch fails the task: invalid_input, INPUT_INVALID). */
  input?: SchemaLike<I>;
  /** Declared to the server, which checks the outputs against it (CONTRACT_VIOLATION). */
  output?: SchemaLike<O>;
  run(input: I, ctx: TaskContext): Promise<O> | O;
}

export interface CompiledHandler {
  definition: HandlerDefinition;
  input?: CompiledSchema;
  output?: CompiledSchema;
}

/** Limits on the log lines posted with a result, so a chatty handler cannot make it too large. */
const MAX_LOG_LINES = 200;
const MAX_LOG_CHARS = 8_192;
const MAX_PROGRESS_MESSAGE_CHARS = 1_000;

const MAX_ERROR_MESSAGE_CHARS = 4_096;

/**
 * An error code as the server takes it: upper-case letters, digits and "_", starting with a letter,
 * 64 characters at most (`resize-failed` becomes `RESIZE_FAILED`).
 */
export function errorCode(code: string): string {
  const c = code
    .toUpperCase()
    .replace(/[^A-Z0-9_]+/g, '_')
    .replace(/^[^A-Z]+/, '');
  return (c || 'HANDLER_ERROR').slice(0, 64);
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * Text as the server takes it (it refuses NUL and lone surrogates anywhere in a result or progress
 * report): at most `max` UTF-16 units, cut before a surrogate pair rather than through it, with NUL
 * and lone surrogates replaced by U+FFFD.
 */
export function postableText(text: string, max: number): string {
  let cut = text.length > max ? text.slice(0, max) : text;
  if (cut.length < text.length && /[\ud800-\udbff]$/.test(cut)) cut = cut.slice(0, -1);
  return cut.replace(LONE_SURROGATE, '\ufffd').replace(/\u0000/g, '\ufffd');
}

/** A value (a thrown one, a message) as text: an Error's message, else String(it), else its tag (`[object Object]`), never throwing. */
function asText(e: unknown): string {
  try {
    return e instanceof Error ? String(e.message) : String(e);
  } catch {
    try {
      return Object.prototype.toString.call(e);
    } catch {
      return 'a thrown value that cannot be read';
    }
  }
}

/** Whether `e` is a TaskError (false for a value that cannot even be asked: a revoked Proxy). */
function isTaskError(e: unknown): e is TaskError {
  try {
    return e instanceof TaskError;
  } catch {
    return false;
  }
}

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

class DeadlineExceeded extends Error {
  override readonly name = 'DeadlineExceeded';
}

/**
 * One attempt of a task on this worker: validates the input, runs the handler with its context and
 * turns what happened into the result body. A cancelled execution yields no result.
 */
export class TaskExecution {
  private readonly controller = new AbortController();
  private readonly logs: { level: LogLevel; message: string }[] = [];
  private namedStatus: string | undefined;
  private cancelReason: string | undefined;

  constructor(
    readonly task: Task,
    private readonly handler: CompiledHandler | undefined,
    private readonly onProgress: (task: Task, percent?: number, message?: string, data?: JsonObject) => void,
  ) {}

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get cancelled(): boolean {
    return this.cancelReason !== undefined;
  }

  /** Aborts the handler; the execution then posts nothing. */
  cancel(reason: string): void {
    if (this.cancelReason !== undefined) return;
    this.cancelReason = reason;
    this.controller.abort(new Error(`task cancelled: ${reason}`));
  }

  /** Runs the attempt; the result body to post, or undefined when it was cancelled. */
  async execute(): Promise<ResultBody | undefined> {
    const body = await this.outcome();
    return this.cancelled ? undefined : body;
  }

  private async outcome(): Promise<ResultBody> {
    if (!this.handler) {
      return this.failed('permanent', 'TASK_TYPE_UNKNOWN', `this worker has no handler for ${this.task.taskType}`);
    }
    let input: unknown = this.task.inputs;
    const check = this.handler.input?.validate?.(input);
    if (check && !check.ok) return this.failed('invalid_input', 'INPUT_INVALID', check.message);
    if (check?.ok) input = check.value;

    const deadlineMs = Date.parse(this.task.deadline);
    const timer = Number.isFinite(deadlineMs)
      ? setTimeout(
          () => this.controller.abort(new DeadlineExceeded(`deadline ${this.task.deadline} passed`)),
          Math.max(0, deadlineMs - Date.now()),
        )
      : undefined;
    try {
      const returned = await this.handler.definition.run(input, this.context(deadlineMs));
      return this.succeeded(returned);
    } catch (e) {
      if (isTaskError(e)) return this.failed(e.errorClass, e.code, e.message);
      if (this.controller.signal.reason instanceof DeadlineExceeded) {
        return this.failed('transient', 'DEADLINE_EXCEEDED', (this.controller.signal.reason as Error).message);
      }
      return this.failed('transient', 'HANDLER_ERROR', asText(e));
    } finally {
      clearTimeout(timer);
    }
  }

  private context(deadlineMs: number): TaskContext {
    const t = this.task;
    return {
      signal: this.controller.signal,
      attemptId: t.attemptId,
      attempt: t.attempt,
      runId: t.runId,
      stepId: t.stepId,
      dagId: t.dagId,
      dagVersion: t.dagVersion,
      taskType: t.taskType,
      deadline: new Date(deadlineMs),
      traceparent: t.traceparent,
      progress: (percent, message, data) => {
        if (this.cancelled) return;
        const p = percent === undefined || !Number.isFinite(percent) ? undefined : Math.min(100, Math.max(0, percent));
        const text = message === undefined ? undefined : postableText(asText(message), MAX_PROGRESS_MESSAGE_CHARS);
        try {
          this.onProgress(t, p, text, data);
        } catch {
          // Best effort: a report that cannot be sent (data that is not JSON) is dropped.
        }
      },
      log: (level, message) => {
        if (this.logs.length < MAX_LOG_LINES)
          this.logs.push({ level, message: postableText(asText(message), MAX_LOG_CHARS) });
      },
      setNamedStatus: (name) => {
        this.namedStatus = name;
      },
    };
  }

  private succeeded(returned: unknown): ResultBody {
    let outputs: unknown = returned ?? {};
    try {
      // Only JSON reaches the server: dates become strings, undefined properties go.
      outputs = JSON.parse(JSON.stringify(outputs));
    } catch (e) {
      return this.failed('permanent', 'OUTPUT_NOT_JSON', `the handler returned a value that is not JSON: ${String(e)}`);
    }
    if (!isPlainObject(outputs)) {
      return this.failed('permanent', 'OUTPUT_NOT_OBJECT', 'the handler must return an object (the step outputs)');
    }
    return {
      epoch: this.task.epoch,
      status: 'succeeded',
      outputs: outputs as JsonObject,
      ...(this.namedStatus !== undefined ? { namedStatus: this.namedStatus } : {}),
      ...(this.logs.length > 0 ? { logs: this.logs } : {}),
    };
  }

  /** A failed result carries no outputs and no named status (the server refuses them). */
  private failed(errorClass: TaskError['errorClass'], code: string, message: string): ResultBody {
    return {
      epoch: this.task.epoch,
      status: 'failed',
      error: { class: errorClass, code: errorCode(code), message: postableText(message, MAX_ERROR_MESSAGE_CHARS) },
      ...(this.logs.length > 0 ? { logs: this.logs } : {}),
    };
  }
}
