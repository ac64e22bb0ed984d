/**
 * A failure the caller can act on. `code` is stable (clients match on it); `status` is the HTTP
 * status the global filter answers with; `headers` go out with the answer (e.g. `Retry-After` on a
 * 429 or 503). Domain modules subclass or instantiate it with their codes.
 */
export class DomainError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status: number,
    readonly details?: unknown,
    readonly headers?: Readonly<Record<string, string>>,
  ) {
    super(message);
    this.name = 'DomainError';
  }
}

export const badRequest = (code: string, message: string, details?: unknown) =>
  new DomainError(code, message, 400, details);
export const unauthorized = (message = 'missing or invalid credentials', code = 'UNAUTHENTICATED') =>
  new DomainError(code, message, 401);
export const forbidden = (message: string, code = 'FORBIDDEN') => new DomainError(code, message, 403);
export const notFound = (what: string, code = 'NOT_FOUND') => new DomainError(code, `${what} not found`, 404);
export const conflict = (code: string, message: string) => new DomainError(code, message, 409);
export const unprocessable = (code: string, message: string) => new DomainError(code, message, 422);
