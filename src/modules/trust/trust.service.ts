import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { TenantTx } from '../../core/database/handles';
import { badRequest, conflict, DomainError, forbidden, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import { canonicalJson } from '../../core/json/canonical-json';
import type { TenantPrincipalT } from '../../core/http/request-context';
import {
  DETACHED_JWS_ALG,
  DetachedJwsError,
  ed25519PublicJwk,
  parseDetached,
  verifyDetachedWith,
} from './detached-jws';
import type { AddTrustKeyBody, TenantPolicy, TrustKeyDto } from './trust.dto';
import { TrustRepository, type TrustKeyRecord } from './trust.repository';

/** Who a verified detached signature belongs to. */
export interface VerifiedSigner {
  kid: string;
  owner: string;
  alg: string;
}

/** Error code prefix: bundle imports answer BUNDLE_*, signed API publishes DAG_*. */
export type SignatureContext = 'BUNDLE' | 'DAG';

type PageKey = { c: string; k: string };
const isPageKey = (v: unknown): v is PageKey =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as PageKey).c === 'string' &&
  typeof (v as PageKey).k === 'string' &&
  !Number.isNaN(Date.parse((v as PageKey).c));

/**
 * The tenant's trust store (public Ed25519 keys allowed to sign bundles and DAG versions) and the
 * tenant policy `requireSignedDags`. Every signature check of the platform goes through here.
 */
@Injectable()
export class TrustService {
  constructor(
    private readonly db: Database,
    private readonly repo: TrustRepository,
  ) {}

  async addKey(p: TenantPrincipalT, body: AddTrustKeyBody): Promise<TrustKeyDto> {
    if ('d' in body.publicJwk)
      throw badRequest('TRUST_KEY_PRIVATE', 'publicJwk carries a private key part (d); send the public key only');
    const jwk = ed25519PublicJwk.safeParse(body.publicJwk);
    if (!jwk.success) {
      throw badRequest('TRUST_KEY_INVALID', 'publicJwk must be an Ed25519 public JWK {kty: "OKP", crv: "Ed25519", x}', {
        issues: jwk.error.issues.map((i) => ({
          path: ['body', 'publicJwk', ...i.path.map(String)].join('.'),
          message: i.message,
        })),
      });
    }
    if (jwk.data.kid !== undefined && jwk.data.kid !== body.kid)
      throw badRequest('TRUST_KEY_INVALID', 'publicJwk.kid differs from kid');
    const expiresAt = body.expiresAt ? new Date(body.expiresAt) : null;
    const row = await this.db.withTenant(p.tenantId, (tx) =>
      this.repo.insert(tx, {
        kid: body.kid,
        owner: body.owner,
        publicJwk: { ...jwk.data, kid: body.kid },
        createdBy: p.subject,
        expiresAt,
      }),
    );
    if (!row)
      throw conflict(
        'TRUST_KEY_EXISTS',
        `a key with kid ${body.kid} is already trusted (revoke it and add the new one under another kid)`,
      );
    return toDto(row);
  }

  async getKey(tenantId: string, kid: string): Promise<TrustKeyDto> {
    const row = await this.db.withTenant(tenantId, (tx) => this.repo.find(tx, kid));
    if (!row) throw notFound('trust key');
    return toDto(row);
  }

  async listKeys(tenantId: string, q: { limit: number; pageToken?: string }) {
    const after = decodePageToken(q.pageToken, isPageKey);
    const rows = await this.db.withTenant(tenantId, (tx) =>
      this.repo.list(tx, { limit: q.limit + 1, after: after && { createdAt: new Date(after.c), kid: after.k } }),
    );
    const items = rows.slice(0, q.limit);
    const last = items[items.length - 1];
    return {
      items: items.map(toDto),
      nextPageToken: rows.length > q.limit ? encodePageToken({ c: last.createdAt.toISOString(), k: last.kid }) : null,
    };
  }

  /** Revokes a key at once: from now on, nothing it signed verifies. Idempotent. */
  async revokeKey(p: TenantPrincipalT, kid: string): Promise<TrustKeyDto> {
    const row = await this.db.withTenant(p.tenantId, (tx) => this.repo.revoke(tx, kid, p.subject));
    if (!row) throw notFound('trust key');
    return toDto(row);
  }

  /**
   * Verifies a compact detached JWS (see detached-jws.ts) over `payload` against the tenant's trust
   * store: the kid is trusted, not revoked, not expired, and the Ed25519 signature holds.
   */
  async verifyDetached(
    tenantId: string,
    payload: Uint8Array,
    jws: string,
    ctx: SignatureContext = 'DAG',
  ): Promise<VerifiedSigner> {
    return this.db.withTenant(tenantId, (tx) => this.verifyDetachedIn(tx, payload, jws, ctx));
  }

  /** As verifyDetached, over the RFC 8785 canonical JSON of `value` (a DAG definition as submitted). */
  async verifyDetachedJson(
    tenantId: string,
    value: unknown,
    jws: string,
    ctx: SignatureContext = 'DAG',
  ): Promise<VerifiedSigner> {
    let bytes: Buffer;
    try {
      bytes = Buffer.from(canonicalJson(value), 'utf8');
    } catch {
      throw signatureError(ctx, 'SIGNATURE_INVALID', 'the signed content has no RFC 8785 canonical JSON form');
    }
    return this.verifyDetached(tenantId, bytes, jws, ctx);
  }

  /** As verifyDetached, inside the caller's tenant transaction. */
  async verifyDetachedIn(
    tx: TenantTx,
    payload: Uint8Array,
    jws: string,
    ctx: SignatureContext,
  ): Promise<VerifiedSigner> {
    let kid: string;
    try {
      kid = parseDetached(jws).header.kid;
    } catch (e) {
      throw signatureError(ctx, 'SIGNATURE_INVALID', e instanceof DetachedJwsError ? e.message : 'malformed signature');
    }
    const key = await this.repo.find(tx, kid);
    if (!key) throw signatureError(ctx, 'KEY_UNTRUSTED', `key ${kid} is not in this tenant's trust store`);
    if (key.revokedAt)
      throw signatureError(ctx, 'KEY_REVOKED', `key ${kid} was revoked at ${key.revokedAt.toISOString()}`);
    if (key.expiresAt && key.expiresAt.getTime() <= Date.now()) {
      throw signatureError(ctx, 'KEY_EXPIRED', `key ${kid} expired at ${key.expiresAt.toISOString()}`);
    }
    try {
      await verifyDetachedWith(payload, jws, key.publicJwk);
    } catch {
      // An Ed25519 signature does not say which key made it: a changed content and a key that
      // reuses a trusted kid fail alike, so the message names both.
      throw signatureError(
        ctx,
        'SIGNATURE_INVALID',
        `the signature does not verify with the trusted key ${kid} (owner "${key.owner}"): either the signed content changed after signing, or it was signed by a different key that reuses the kid ${kid}; the trusted key with kid ${kid} differs from that key (give a new signing key a kid that is not trusted yet, e.g. ordo bundle keygen without --kid)`,
      );
    }
    return { kid, owner: key.owner, alg: DETACHED_JWS_ALG };
  }

  async getPolicy(tenantId: string): Promise<TenantPolicy> {
    return this.db.withTenant(tenantId, async (tx) => toPolicy(await this.repo.settings(tx)));
  }

  async setPolicy(tenantId: string, policy: TenantPolicy): Promise<TenantPolicy> {
    return this.db.withTenant(tenantId, async (tx) =>
      toPolicy(await this.repo.mergeSettings(tx, { requireSignedDags: policy.requireSignedDags })),
    );
  }

  /** Whether the tenant requires every DAG version to carry a trusted signature. */
  async requiresSignedDags(tx: TenantTx): Promise<boolean> {
    return toPolicy(await this.repo.settings(tx)).requireSignedDags;
  }

  /** The publish-time policy check: under requireSignedDags, an unsigned version is refused (403). */
  async enforceDagSignaturePolicy(tx: TenantTx, signature: { kid: string } | null | undefined): Promise<void> {
    if (signature) return;
    if (await this.requiresSignedDags(tx)) {
      throw forbidden(
        'this tenant requires signed DAG versions: publish through a signed bundle or send X-Ordo-Dag-Signature',
        'DAG_SIGNATURE_REQUIRED',
      );
    }
  }
}

function signatureError(ctx: SignatureContext, what: string, message: string): DomainError {
  return new DomainError(`${ctx}_${what}`, message, 422);
}

function toPolicy(settings: Record<string, unknown>): TenantPolicy {
  return { requireSignedDags: settings.requireSignedDags === true };
}

function toDto(r: TrustKeyRecord): TrustKeyDto {
  return {
    kid: r.kid,
    owner: r.owner,
    publicJwk: r.publicJwk,
    createdBy: r.createdBy,
    createdAt: r.createdAt.toISOString(),
    expiresAt: r.expiresAt?.toISOString() ?? null,
    revokedAt: r.revokedAt?.toISOString() ?? null,
  };
}
