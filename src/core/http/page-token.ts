import { badRequest } from '../errors/domain-error';

/** Opaque keyset page tokens: base64url JSON of the last row's sort key. */
export function encodePageToken(key: unknown): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

export function decodePageToken<T>(token: string | undefined, check: (v: unknown) => v is T): T | undefined {
  if (token === undefined) return undefined;
  try {
    const v: unknown = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
    if (check(v)) return v;
  } catch {
    // fall through
  }
  throw badRequest('INVALID_PAGE_TOKEN', 'pageToken is not one this API issued');
}
