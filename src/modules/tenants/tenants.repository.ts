import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb } from '../../core/database/handles';

export interface TenantRow {
  id: string;
  name: string;
  status: string;
  created_at: Date;
  disabled_at: Date | null;
}

/** The tenant registry. Platform operations span tenants, so they use the system handle. */
@Injectable()
export class TenantsRepository {
  /** Inserts a tenant; returns undefined when the id is taken. */
  async insert(db: SystemDb, t: { id: string; name: string }): Promise<TenantRow | undefined> {
    return db
      .insertInto('tenant')
      .values({ id: t.id, name: t.name })
      .onConflict((oc) => oc.column('id').doNothing())
      .returning(['id', 'name', 'status', 'created_at', 'disabled_at'])
      .executeTakeFirst();
  }

  async list(db: SystemDb, page: { limit: number; afterId?: string }): Promise<TenantRow[]> {
    let q = db.selectFrom('tenant').select(['id', 'name', 'status', 'created_at', 'disabled_at']);
    if (page.afterId !== undefined) q = q.where('id', '>', page.afterId);
    return q.orderBy('id').limit(page.limit).execute();
  }

  async count(db: SystemDb): Promise<number> {
    const r = await db
      .selectFrom('tenant')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async setStatus(db: SystemDb, id: string, status: 'active' | 'disabled'): Promise<TenantRow | undefined> {
    return db
      .updateTable('tenant')
      .set({ status, disabled_at: status === 'disabled' ? sql<Date>`coalesce(disabled_at, now())` : null })
      .where('id', '=', id)
      .returning(['id', 'name', 'status', 'created_at', 'disabled_at'])
      .executeTakeFirst();
  }

  async find(db: SystemDb, id: string): Promise<TenantRow | undefined> {
    return db
      .selectFrom('tenant')
      .select(['id', 'name', 'status', 'created_at', 'disabled_at'])
      .where('id', '=', id)
      .executeTakeFirst();
  }
}
