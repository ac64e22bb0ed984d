import { Inject, Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { SignJWT, decodeProtectedHeader, jwtVerify, type JWTPayload } from 'jose';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { PLATFORM_SCOPE, WORKER_SCOPE, type TenantScope } from '../../core/http/route-spec';
import { POOL_NAME } from '../workers/worker-names';
import { unauthorized } from '../../core/errors/domain-error';
import { SigningKeys } from './signing-keys';
import { isTenantScope } from './scopes';

export const AUDIENCE = 'ordo-api';
const KID = /^[A-Za-z0-9_-]{43}$/;
/** Seconds of clock skew accepted on `exp`. */
const CLOCK_TOLERANCE_S = 5;
/** Tokens whose signature and claims were verified, remembered so the next presentation skips the signature check. */
const MAX_VERIFIED = 10_000;

export type VerifiedToken =
  | { kind: 'tenant'; sub: string; tid: string; scopes: TenantScope[]; jti: string; exp: number }
  | { kind: 'platform'; sub: string; jti: string; exp: number }
  | { kind: 'worker'; sub: string; tid: string; pool: string; jti: string; exp: number };

export interface MintedToken {
  token: string;
  jti: string;
  expiresAt: Date;
}

/**
 * Signs and verifies the instance's JWTs: EdDSA only, known kid, issuer and audience checked. A
 * token verified once is remembered (the exact token text, with its kid): presented again, only
 * its expiry and its key's presence are checked, as the signature and claims cannot have changed.
 */
@Injectable()
export class TokenService {
  private readonly verified = new Map<string, { token: VerifiedToken; kid: string }>();

  constructor(
    private readonly keys: SigningKeys,
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
  ) {}

  async mintTenant(tid: string, sub: string, scopes: TenantScope[], ttlSeconds?: number): Promise<MintedToken> {
    return this.mint({ tid, scope: scopes.join(' ') }, sub, ttlSeconds);
  }

  /** A worker token: the one scope `worker`, bound to its tenant and `pool`. */
  async mintWorker(tid: string, sub: string, pool: string, ttlSeconds?: number): Promise<MintedToken> {
    return this.mint({ tid, scope: WORKER_SCOPE, pool }, sub, ttlSeconds);
  }

  async mintPlatform(sub: string, ttlSeconds?: number): Promise<MintedToken> {
    return this.mint({ scope: PLATFORM_SCOPE }, sub, ttlSeconds);
  }

  private async mint(claims: JWTPayload, sub: string, ttlSeconds?: number): Promise<MintedToken> {
    const key = this.keys.active;
    const jti = randomUUID();
    const now = Math.floor(Date.now() / 1000);
    const exp = now + (ttlSeconds ?? this.config.ORDO_TOKEN_TTL_SECONDS);
    const token = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'EdDSA', kid: key.kid, typ: 'JWT' })
      .setSubject(sub)
      .setJti(jti)
      .setIssuer(this.config.ORDO_ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt(now)
      .setExpirationTime(exp)
      .sign(key.privateKey);
    return { token, jti, expiresAt: new Date(exp * 1000) };
  }

  /** Verifies signature, algorithm, kid, issuer, audience, expiry and claim shapes; any failure is a 401. */
  async verify(token: string): Promise<VerifiedToken> {
    const known = this.verified.get(token);
    if (known) {
      if (known.token.exp <= Math.floor(Date.now() / 1000) - CLOCK_TOLERANCE_S) {
        this.verified.delete(token);
        throw unauthorized('token expired', 'TOKEN_EXPIRED');
      }
      if (await this.keys.find(known.kid)) return known.token;
      this.verified.delete(token);
    }
    const v = await this.verifySigned(token);
    if (this.verified.size >= MAX_VERIFIED) this.verified.delete(this.verified.keys().next().value!);
    this.verified.set(token, v);
    return v.token;
  }

  private async verifySigned(token: string): Promise<{ token: VerifiedToken; kid: string }> {
    let header: ReturnType<typeof decodeProtectedHeader>;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      throw unauthorized('malformed token', 'INVALID_TOKEN');
    }
    if (header.alg !== 'EdDSA') throw unauthorized('token algorithm not accepted', 'INVALID_TOKEN');
    if (typeof header.kid !== 'string' || !KID.test(header.kid))
      throw unauthorized('token has no valid kid', 'INVALID_TOKEN');
    if (header.crit !== undefined || header.jku !== undefined || header.jwk !== undefined || header.x5u !== undefined) {
      throw unauthorized('token header not accepted', 'INVALID_TOKEN');
    }
    const key = await this.keys.find(header.kid);
    if (!key) throw unauthorized('token signed by an unknown key', 'INVALID_TOKEN');
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, key.publicKey, {
        algorithms: ['EdDSA'],
        issuer: this.config.ORDO_ISSUER,
        audience: AUDIENCE,
        requiredClaims: ['sub', 'jti', 'exp', 'iat'],
        clockTolerance: CLOCK_TOLERANCE_S,
      }));
    } catch (e) {
      const code = (e as { code?: string }).code;
      throw unauthorized(
        code === 'ERR_JWT_EXPIRED' ? 'token expired' : 'token rejected',
        code === 'ERR_JWT_EXPIRED' ? 'TOKEN_EXPIRED' : 'INVALID_TOKEN',
      );
    }
    const { sub, jti, exp, scope, tid, pool } = payload as JWTPayload & {
      scope?: unknown;
      tid?: unknown;
      pool?: unknown;
    };
    if (typeof sub !== 'string' || typeof jti !== 'string' || typeof exp !== 'number' || typeof scope !== 'string') {
      throw unauthorized('token claims malformed', 'INVALID_TOKEN');
    }
    const scopes = scope.split(' ').filter(Boolean);
    if (tid === undefined) {
      if (scopes.length !== 1 || scopes[0] !== PLATFORM_SCOPE)
        throw unauthorized('token claims malformed', 'INVALID_TOKEN');
      return { token: { kind: 'platform', sub, jti, exp }, kid: header.kid };
    }
    if (scopes.length === 1 && scopes[0] === WORKER_SCOPE) {
      if (typeof tid !== 'string' || typeof pool !== 'string' || !POOL_NAME.test(pool))
        throw unauthorized('token claims malformed', 'INVALID_TOKEN');
      return { token: { kind: 'worker', sub, tid, pool, jti, exp }, kid: header.kid };
    }
    if (typeof tid !== 'string' || pool !== undefined || scopes.length === 0 || !scopes.every(isTenantScope)) {
      throw unauthorized('token claims malformed', 'INVALID_TOKEN');
    }
    return { token: { kind: 'tenant', sub, tid, scopes: scopes, jti, exp }, kid: header.kid };
  }
}
