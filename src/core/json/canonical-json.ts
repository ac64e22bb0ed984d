import { createHash } from 'node:crypto';
import { canonicalJson } from './jcs';

export { canonicalJson };

/** SHA-256, lowercase hex, of the RFC 8785 form of `value`. */
export function canonicalHash(value: unknown): string {
  return createHash('sha256').update(canonicalJson(value), 'utf8').digest('hex');
}
