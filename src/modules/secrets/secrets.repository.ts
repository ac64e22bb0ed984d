import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type TenantTx } from '../../core/database/handles';

export interface SecretRow {
  name: string;
  keyId: string;
  nonce: Buffer;
  ciphertext: Buffer;
}

export interface SecretMeta {
  name: string;
  createdBy: string;
  updatedBy: string;
  createdAt: Date;
  updatedAt: Date;
}

@Injectable()
export class SecretsRepository {
  /** Creates or replaces; `created` tells which. */
  async upsert(tx: TenantTx, s: SecretRow & { by: string }): Promise<SecretMeta & { created: boolean }> {
    const row = await tx
      .insertInto('secret')
      .values({
        tenant_id: tenantOf(tx),
        name: s.name,
        key_id: s.keyId,
        nonce: s.nonce,
        ciphertext: s.ciphertext,
        created_by: s.by,
        updated_by: s.by,
      })
      .onConflict((oc) =>
        oc.columns(['tenant_id', 'name']).doUpdateSet({
          key_id: s.keyId,
          nonce: s.nonce,
          ciphertext: s.ciphertext,
          updated_by: s.by,
          updated_at: sql<Date>`now()`,
        }),
      )
      .returning([
        'name',
        'created_by',
        'updated_by',
        'created_at',
        'updated_at',
        sql<boolean>`(xmax = 0)`.as('created'),
      ])
      .executeTakeFirstOrThrow();
    return { ...toMeta(row), created: row.created };
  }

  async list(tx: TenantTx): Promise<SecretMeta[]> {
    const rows = await tx
      .selectFrom('secret')
      .select(['name', 'created_by', 'updated_by', 'created_at', 'updated_at'])
      .where('tenant_id', '=', tenantOf(tx))
      .orderBy('name')
      .execute();
    return rows.map(toMeta);
  }

  async count(tx: TenantTx): Promise<number> {
    const r = await tx
      .selectFrom('secret')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('tenant_id', '=', tenantOf(tx))
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async delete(tx: TenantTx, name: string): Promise<boolean> {
    const r = await tx
      .deleteFrom('secret')
      .where('tenant_id', '=', tenantOf(tx))
      .where('name', '=', name)
      .executeTakeFirst();
    return r.numDeletedRows > 0n;
  }

  /** The sealed values of the named secrets (one statement); absent names are simply missing. */
  async findMany(tx: TenantTx, names: readonly string[]): Promise<SecretRow[]> {
    if (names.length === 0) return [];
    const rows = await tx
      .selectFrom('secret')
      .select(['name', 'key_id', 'nonce', 'ciphertext'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('name', 'in', [...names])
      .execute();
    return rows.map((r) => ({ name: r.name, keyId: r.key_id, nonce: r.nonce, ciphertext: r.ciphertext }));
  }
}

function toMeta(r: {
  name: string;
  created_by: string;
  updated_by: string;
  created_at: Date;
  updated_at: Date;
}): SecretMeta {
  return {
    name: r.name,
    createdBy: r.created_by,
    updatedBy: r.updated_by,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}
