export { OrdoWorker, type OrdoWorkerOptions, type WorkerEvents } from './worker';
export type { TaskContext, HandlerDefinition } from './task-execution';
export { TaskError, OrdoApiError, OrdoUnreachableError } from './errors';
export type { SchemaLike, ZodLike } from './schema';
export type { TransportKind } from './session';
export type { BackoffOptions } from './backoff';
export type {
  ErrorClass,
  JsonObject,
  JsonSchema,
  JsonValue,
  LogLevel,
  Registration,
  Resources,
  ResultAnswer,
  ResultBody,
  Task,
} from './protocol';
export { SDK_VERSION } from './version';
