import { z } from 'zod';
import { SCOPES } from '../../core/http/route-spec';

export const scopeSchema = z.enum(SCOPES);

export const createTokenBody = z
  .strictObject({
    subject: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces')
      .optional(),
    scopes: z.array(scopeSchema).min(1).max(3),
    ttlSeconds: z
      .number()
      .int()
      .min(60)
      .max(10 * 365 * 24 * 3600)
      .optional(),
    description: z.string().max(500).optional(),
  })
  .meta({ id: 'CreateTokenRequest' });

export const mintedTokenSchema = z
  .object({
    token: z.string().describe('The JWT; shown once, never stored'),
    jti: z.uuid(),
    tenantId: z.string(),
    subject: z.string(),
    scopes: z.array(scopeSchema),
    expiresAt: z.iso.datetime(),
  })
  .meta({ id: 'MintedToken' });

export const tokenRecordSchema = z
  .object({
    jti: z.uuid(),
    subject: z.string(),
    scopes: z.array(scopeSchema),
    description: z.string().nullable(),
    createdBy: z.string(),
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime(),
    revokedAt: z.iso.datetime().nullable(),
  })
  .meta({ id: 'TokenRecord' });

export const pageQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  pageToken: z.string().max(500).optional(),
});

export const tokenListSchema = z
  .object({ items: z.array(tokenRecordSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'TokenList' });
export const jtiParams = z.strictObject({ jti: z.uuid() });

export type CreateTokenBody = z.infer<typeof createTokenBody>;
export type MintedTokenDto = z.infer<typeof mintedTokenSchema>;
export type TokenRecordDto = z.infer<typeof tokenRecordSchema>;
