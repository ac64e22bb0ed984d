import { DomainError } from '../../core/errors/domain-error';
import { recordExportFailure } from '../../core/telemetry/metrics';

/**
 * Passes an export's lines through, counting the export in orchestrator_export_failures_total when
 * making them fails on the server side (a database or signing error, whether or not lines were
 * already sent). A refused request (a domain error with a 4xx status) and a client that stops
 * reading are not failures.
 */
export async function* countingFailures<T, R>(
  kind: 'runs' | 'audit',
  lines: AsyncGenerator<T, R>,
): AsyncGenerator<T, R> {
  try {
    return yield* lines;
  } catch (e) {
    if (!(e instanceof DomainError && e.status < 500)) recordExportFailure(kind);
    throw e;
  }
}
