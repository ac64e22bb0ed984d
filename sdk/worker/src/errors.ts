import type { ErrorClass } from './protocol';

/**
 * Thrown by a handler to fail its task with an error class: `transient` (the step's retry policy
 * applies), `permanent` (not retried) or `invalid_input` (not retried; the run fails naming the
 * input). Any other exception fails the task as transient with code HANDLER_ERROR.
 */
export class TaskError extends Error {
  override readonly name = 'TaskError';
  constructor(
    readonly errorClass: ErrorClass,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** An error answer of the server: its HTTP status and the envelope's code, message and trace id. */
export class OrdoApiError extends Error {
  override readonly name = 'OrdoApiError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly traceId?: string,
  ) {
    super(`${status} ${code}: ${message}`);
  }

  /** 429 and 5xx answers other than 501: the same call may succeed later or on another URL. */
  get retryable(): boolean {
    return this.status === 429 || (this.status >= 500 && this.status !== 501);
  }
}

/** No server answered (every URL refused, timed out or reset) within the call's attempts. */
export class OrdoUnreachableError extends Error {
  override readonly name = 'OrdoUnreachableError';
  constructor(
    message: string,
    override readonly cause?: unknown,
  ) {
    super(message);
  }
}
