import type { IncomingHttpHeaders } from 'node:http';

export const SESSION_COOKIE = 'ordo_session';

/**
 * The console session cookie's value in a request's Cookie header; undefined without one. When a
 * browser sends the name twice (a cookie of another path), the first is taken: browsers send the
 * most specific path first, and ours is `/`, so a second value can only be refused, never chosen.
 */
export function sessionCookieOf(headers: IncomingHttpHeaders): string | undefined {
  const header = headers.cookie;
  if (typeof header !== 'string') return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0 || part.slice(0, eq).trim() !== SESSION_COOKIE) continue;
    const value = part.slice(eq + 1).trim();
    return value === '' ? undefined : value;
  }
  return undefined;
}

/**
 * The Set-Cookie header of a session: HttpOnly (no script reads it), SameSite=Strict (no
 * cross-site request carries it), Path=/, Secure when the request came over TLS. `maxAgeSeconds`
 * 0 clears it. The value is a base64url session id, so it needs no encoding.
 */
export function sessionSetCookie(value: string, maxAgeSeconds: number, secure: boolean): string {
  const attrs = [`${SESSION_COOKIE}=${value}`, `Max-Age=${maxAgeSeconds}`, 'Path=/', 'HttpOnly', 'SameSite=Strict'];
  if (maxAgeSeconds === 0) attrs.push('Expires=Thu, 01 Jan 1970 00:00:00 GMT');
  if (secure) attrs.push('Secure');
  return attrs.join('; ');
}
