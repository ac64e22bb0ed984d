import type { Kysely, Transaction } from 'kysely';
import type { DB } from './db.generated';

declare const tenantBrand: unique symbol;
declare const systemBrand: unique symbol;
/** Marks a TenantStatement at run time too (a transaction never has it). */
const statementBrand: unique symbol = Symbol('ordo.tenantStatement');

/**
 * A transaction in which `app.tenant_id` is set (transaction-local) and row-level security
 * restricts every table to that tenant. Repositories that serve requests accept only this type,
 * so a tenant-less query does not compile.
 */
export type TenantTx = Transaction<DB> & { readonly [tenantBrand]: true };

/**
 * The cross-tenant handle for system work (scheduler scans, the reaper, queue claims).
 * Connected as the system role; never handed to request code.
 */
export type SystemDb = Kysely<DB> & { readonly [systemBrand]: true };
export type SystemTx = Transaction<DB> & { readonly [systemBrand]: true };

/**
 * A tenant's handle on which each statement is a transaction of its own, for the statements that
 * bind their tenant first themselves (a database function, e.g. ordo_create_runs): row-level
 * security then restricts the statement to that tenant, as in a TenantTx. Connected as the
 * application role.
 */
export interface TenantStatement {
  readonly db: Kysely<DB>;
  readonly tenantId: string;
  readonly [statementBrand]: true;
}

export function tenantStatement(db: Kysely<DB>, tenantId: string): TenantStatement {
  return { db, tenantId, [statementBrand]: true };
}

/** Whether `h` is a tenant's one-statement handle (made by tenantStatement), not a transaction. */
export function isTenantStatement(h: TenantTx | TenantStatement): h is TenantStatement {
  return statementBrand in h;
}

const tenantOfTx = new WeakMap<object, string>();

export function brandTenantTx(trx: Transaction<DB>, tenantId: string): TenantTx {
  tenantOfTx.set(trx, tenantId);
  return trx as TenantTx;
}

/** The tenant a scoped transaction is bound to; repositories repeat it in `where tenant_id = …`. */
export function tenantOf(tx: TenantTx): string {
  const t = tenantOfTx.get(tx);
  if (!t) throw new Error('transaction is not tenant-scoped');
  return t;
}
