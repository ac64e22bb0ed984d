import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { SCOPES, WORKER_SCOPE } from '../../core/http/route-spec';
import { POOL_NAME } from '../workers/worker-names';

export const scopeSchema = z.enum([...SCOPES, WORKER_SCOPE]);

export const createTokenBody = z
  .strictObject({
    subject: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces')
      .optional(),
    scopes: z
      .array(scopeSchema)
      .min(1)
      .max(3)
      .describe(
        'orchestrator scopes, or the one scope `worker` (an external worker: the worker routes only, in `pool`)',
      ),
    pool: z
      .string()
      .regex(POOL_NAME, 'a pool name: lowercase letters, digits, "-" and "_", up to 63')
      .optional()
      .describe('the worker pool a `worker` token is bound to (required with it, refused without it)'),
    ttlSeconds: z
      .number()
      .int()
      .min(60)
      .max(10 * 365 * 24 * 3600)
      .optional(),
    description: z.string().max(500).optional(),
  })
  .meta({ id: 'CreateTokenRequest' });

/** A token an operator mints for a tenant: orchestrator scopes (worker tokens are minted by the tenant's admins). */
export const operatorTokenBody = z
  .strictObject({
    subject: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces')
      .optional(),
    scopes: z.array(z.enum(SCOPES)).min(1).max(3),
    ttlSeconds: z
      .number()
      .int()
      .min(60)
      .max(10 * 365 * 24 * 3600)
      .optional(),
    description: z.string().max(500).optional(),
  })
  .meta({ id: 'CreateTenantTokenRequest' });

export const mintedTokenSchema = z
  .object({
    token: z.string().describe('The JWT; shown once, never stored'),
    jti: z.uuid(),
    tenantId: z.string(),
    subject: z.string(),
    scopes: z.array(scopeSchema),
    pool: z.string().nullable().describe('the pool of a worker token'),
    expiresAt: z.iso.datetime(),
  })
  .meta({ id: 'MintedToken' });

export const tokenRecordSchema = z
  .object({
    jti: z.uuid(),
    subject: z.string(),
    scopes: z.array(scopeSchema),
    pool: z.string().nullable().describe('the pool of a worker token'),
    lastSeenAt: z.iso.datetime().nullable().describe('when a worker holding this token was last heard from'),
    description: z.string().nullable(),
    createdBy: z.string(),
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime(),
    revokedAt: z.iso.datetime().nullable(),
  })
  .meta({ id: 'TokenRecord' });

export const pageQuery = z.strictObject({
  limit: queryInt(1, 500, 50),
  pageToken: z.string().max(500).optional(),
});

export const tokenListSchema = z
  .object({ items: z.array(tokenRecordSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'TokenList' });
export const jtiParams = z.strictObject({ jti: z.uuid() });

export type CreateTokenBody = z.infer<typeof createTokenBody>;
export type OperatorTokenBody = z.infer<typeof operatorTokenBody>;
export type MintedTokenDto = z.infer<typeof mintedTokenSchema>;
export type TokenRecordDto = z.infer<typeof tokenRecordSchema>;
