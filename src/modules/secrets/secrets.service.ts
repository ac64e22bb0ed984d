import { Inject, Injectable } from '@nestjs/common';
import path from 'node:path';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { Database } from '../../core/database/database';
import { badRequest, DomainError, notFound, conflict } from '../../core/errors/domain-error';
import type { TenantPrincipalT } from '../../core/http/request-context';
import { SecretKeys } from './secret-keys';
import { MAX_SECRET_BYTES, MAX_SECRETS_PER_TENANT, SECRET_NAME, type SecretMetaDto } from './secrets.dto';
import { SecretsRepository, type SecretMeta } from './secrets.repository';

/** A step references secrets its tenant does not have; the engine fails the step with this code. */
export class SecretNotFoundError extends DomainError {
  constructor(readonly missing: string[]) {
    super('SECRET_NOT_FOUND', `secret${missing.length > 1 ? 's' : ''} not found: ${missing.join(', ')}`, 404, {
      missing,
    });
    this.name = 'SecretNotFoundError';
  }
}

/** The GCM additional data: a ciphertext only opens for the tenant and name it was sealed for. */
function aad(tenantId: string, name: string): Buffer {
  return Buffer.from(`ordo-secret:v1\0${tenantId}\0${name}`, 'utf8');
}

/**
 * Tenant secrets: written and listed (names only) through the API, resolved to values only for
 * the engine, at call time. Values are encrypted before they reach the database and never leave
 * this service except through `resolve`.
 */
@Injectable()
export class SecretsService {
  private keys?: SecretKeys;

  constructor(
    private readonly db: Database,
    private readonly repo: SecretsRepository,
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
  ) {}

  private keyStore(): SecretKeys {
    this.keys ??= SecretKeys.open(this.config.ORDO_SIGNING_KEYS_DIR ?? path.join(this.config.home, 'keys'));
    return this.keys;
  }

  async put(principal: TenantPrincipalT, name: string, value: string): Promise<SecretMetaDto & { created: boolean }> {
    if (Buffer.byteLength(value, 'utf8') > MAX_SECRET_BYTES) {
      throw new DomainError('SECRET_TOO_LARGE', `a secret value is at most ${MAX_SECRET_BYTES} bytes`, 413);
    }
    const sealed = this.keyStore().seal(value, aad(principal.tenantId, name));
    const meta = await this.db.withTenant(principal.tenantId, async (tx) => {
      const r = await this.repo.upsert(tx, { name, ...sealed, by: principal.subject });
      if (r.created && (await this.repo.count(tx)) > MAX_SECRETS_PER_TENANT) {
        throw conflict('SECRET_LIMIT', `a tenant has at most ${MAX_SECRETS_PER_TENANT} secrets`);
      }
      return r;
    });
    return { ...toDto(meta), created: meta.created };
  }

  async list(principal: TenantPrincipalT): Promise<{ items: SecretMetaDto[] }> {
    const rows = await this.db.withTenant(principal.tenantId, (tx) => this.repo.list(tx));
    return { items: rows.map(toDto) };
  }

  async delete(principal: TenantPrincipalT, name: string): Promise<void> {
    const found = await this.db.withTenant(principal.tenantId, (tx) => this.repo.delete(tx, name));
    if (!found) throw notFound('secret');
  }

  /**
   * The values of the named secrets of a tenant, for injection into a step's config at call time.
   * Throws SecretNotFoundError (code SECRET_NOT_FOUND, with `missing`) when any name is unknown.
   * Callers must redact the returned values (see makeRedactor) from everything they record.
   */
  /** Seals `value` (JSON) for the database, bound to `context`: only sealJson's `open` with the same context reads it. */
  sealJson(context: string, value: unknown): SealedJson {
    const s = this.keyStore().seal(JSON.stringify(value), Buffer.from(context, 'utf8'));
    return { keyId: s.keyId, nonce: s.nonce.toString('base64'), ciphertext: s.ciphertext.toString('base64') };
  }

  /** The JSON value `sealJson(context, …)` sealed. */
  openJson(context: string, sealed: SealedJson): unknown {
    const text = this.keyStore().open(
      {
        keyId: sealed.keyId,
        nonce: Buffer.from(sealed.nonce, 'base64'),
        ciphertext: Buffer.from(sealed.ciphertext, 'base64'),
      },
      Buffer.from(context, 'utf8'),
    );
    return JSON.parse(text) as unknown;
  }

  async resolve(tenantId: string, names: readonly string[]): Promise<Record<string, string>> {
    const wanted = [...new Set(names)];
    if (wanted.length === 0) return {};
    const bad = wanted.filter((n) => !SECRET_NAME.test(n));
    if (bad.length > 0) throw new SecretNotFoundError(bad);
    const rows = await this.db.withTenant(tenantId, (tx) => this.repo.findMany(tx, wanted));
    const missing = wanted.filter((n) => !rows.some((r) => r.name === n)).sort();
    if (missing.length > 0) throw new SecretNotFoundError(missing);
    const keys = this.keyStore();
    // No prototype: a secret may be named __proto__ or constructor, and is then an ordinary key.
    const out = Object.create(null) as Record<string, string>;
    for (const r of rows) {
      try {
        out[r.name] = keys.open(r, aad(tenantId, r.name));
      } catch {
        throw badRequest('SECRET_UNREADABLE', `secret ${r.name} cannot be decrypted with this instance's keys`);
      }
    }
    return out;
  }
}

/** JSON sealed with the instance's secret key, bound to what it belongs to (`context`). */
export interface SealedJson {
  keyId: string;
  nonce: string;
  ciphertext: string;
}

function toDto(m: SecretMeta): SecretMetaDto {
  return {
    name: m.name,
    createdBy: m.createdBy,
    updatedBy: m.updatedBy,
    createdAt: m.createdAt.toISOString(),
    updatedAt: m.updatedAt.toISOString(),
  };
}
