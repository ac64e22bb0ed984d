import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';

export const tenantIdSchema = z
  .string()
  .regex(
    /^[a-z0-9][a-z0-9-]{0,62}$/,
    'lowercase letters, digits and dashes, at most 63, starting with a letter or digit',
  );

export const createTenantBody = z
  .strictObject({ id: tenantIdSchema, name: z.string().min(1).max(200) })
  .meta({ id: 'CreateTenantRequest' });

export const tenantSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    status: z.enum(['active', 'disabled']),
    createdAt: z.iso.datetime(),
    disabledAt: z.iso.datetime().nullable(),
  })
  .meta({ id: 'Tenant' });

export const tenantParams = z.strictObject({ tenantId: tenantIdSchema });
export const tenantListQuery = z.strictObject({
  limit: queryInt(1, 500, 100),
  pageToken: z.string().max(500).optional(),
});
export const tenantListSchema = z
  .object({ items: z.array(tenantSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'TenantList' });

export type CreateTenantBody = z.infer<typeof createTenantBody>;
export type TenantDto = z.infer<typeof tenantSchema>;
