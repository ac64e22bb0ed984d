/**
 * The external worker protocol as the server speaks it (docs/workers.md, "Protocol"): request and
 * answer bodies of the HTTP routes under /api/v1/workers and the messages of the WebSocket channel.
 */

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** A JSON Schema object, as the server stores it for a task type. */
export type JsonSchema = Record<string, unknown>;

export type ErrorClass = 'transient' | 'permanent' | 'invalid_input';
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface TaskTypeSpec {
  name: string;
  inputSchema?: JsonSchema;
  outputSchema?: JsonSchema;
}

export interface Resources {
  cpu?: number;
  /** A size string such as "16GiB" or "512MiB". */
  memory?: string;
  gpu?: { count: number; model?: string; vram?: string };
}

export interface RegisterRequest {
  name: string;
  pool?: string;
  taskTypes: TaskTypeSpec[];
  resources?: Resources;
  models?: string[];
  maxConcurrent?: number;
  costPerSecond?: number;
  labels?: Record<string, string>;
  sdkVersion?: string;
}

export interface Registration {
  workerId: string;
  pool: string;
  ttlMs: number;
  heartbeatIntervalMs: number;
  longPollMs: number;
}

export type WorkerStatus = 'online' | 'draining' | 'offline';

export interface CancelNotice {
  attemptId: string;
  reason: string;
}

export interface HeartbeatAnswer {
  status: WorkerStatus;
  ttlMs: number;
  cancel: CancelNotice[];
}

export interface Task {
  attemptId: string;
  runId: string;
  stepId: string;
  attempt: number;
  epoch: number;
  taskType: string;
  inputs: JsonObject;
  /** ISO 8601. */
  deadline: string;
  traceparent: string;
  dagId: string;
  dagVersion: number;
}

export interface ResultBody {
  epoch: number;
  status: 'succeeded' | 'failed';
  outputs?: JsonObject;
  namedStatus?: string;
  error?: { class: ErrorClass; code: string; message: string };
  logs?: { level: LogLevel; message: string }[];
}

export interface ResultAnswer {
  outcome: 'succeeded' | 'failed' | 'retrying';
  duplicate: boolean;
  error?: { code: string; message: string };
}

/** Several results in one post (POST /api/v1/workers/{id}/tasks/results). */
export interface ResultsBody {
  results: ({ attemptId: string } & ResultBody)[];
}

/** One answer a posted result: the result's answer, or the refusal it alone would have had. */
export interface ResultsAnswer {
  results: (
    | { attemptId: string; answer: ResultAnswer }
    | { attemptId: string; refused: { status: number; code: string; message: string } }
  )[];
}

export interface ProgressBody {
  epoch: number;
  percent?: number;
  message?: string;
  data?: JsonObject;
}

/**
 * What the worker holds after a connection was lost (the attempts it runs or is posting results
 * of): every other task delivered to it never reached it and is delivered again.
 */
export interface SyncBody {
  holding: string[];
}

export interface SyncAnswer {
  redelivered: string[];
}

/** Messages the worker sends on the channel. */
export type ClientMessage =
  | { type: 'ready'; credit: number }
  | ({ type: 'result'; attemptId: string } & ResultBody)
  | ({ type: 'progress'; attemptId: string } & ProgressBody)
  | { type: 'heartbeat'; loaded?: string[] }
  | ({ type: 'sync' } & SyncBody);

/** Messages the server sends on the channel. */
export type ServerMessage =
  | { type: 'task'; task: Task }
  | { type: 'cancel'; attemptId: string; reason: string }
  | ({ type: 'ack'; attemptId: string } & ResultAnswer)
  | ({ type: 'heartbeat' } & HeartbeatAnswer)
  | ({ type: 'sync' } & SyncAnswer)
  | { type: 'error'; attemptId?: string; code: string; message: string };

/**
 * Answers to a result that mean the server will not take it, whatever is posted again: the attempt
 * went elsewhere, was cancelled, or already has another result. The SDK drops the result.
 */
export const REFUSED_RESULT_CODES: ReadonlySet<string> = new Set([
  'STALE_EPOCH',
  'TASK_CANCELLED',
  'TASK_ORPHANED',
  'RESULT_CONFLICT',
  'TASK_NOT_FOUND',
]);
