import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { ed25519PublicJwk, kidSchema } from './detached-jws';

export const addTrustKeyBody = z
  .strictObject({
    kid: kidSchema,
    owner: z.string().min(1).max(200).describe('The signer this key speaks for; a bundle manifest owner must equal it'),
    publicJwk: z
      .looseObject({})
      .describe('Public Ed25519 JWK {kty: OKP, crv: Ed25519, x}; a JWK with a private part (d) is refused'),
    expiresAt: z.iso.datetime({ offset: true }).optional(),
  })
  .meta({ id: 'AddTrustKeyRequest' });

export const trustKeySchema = z
  .object({
    kid: z.string(),
    owner: z.string(),
    publicJwk: ed25519PublicJwk,
    createdBy: z.string(),
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime().nullable(),
    revokedAt: z.iso.datetime().nullable(),
  })
  .meta({ id: 'TrustKey' });

export const trustKeyParams = z.strictObject({ kid: kidSchema });
export const trustKeyListQuery = z.strictObject({
  limit: queryInt(1, 500, 100),
  pageToken: z.string().max(500).optional(),
});
export const trustKeyListSchema = z
  .object({ items: z.array(trustKeySchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'TrustKeyList' });

export const tenantPolicySchema = z
  .object({
    requireSignedDags: z
      .boolean()
      .describe('Every new DAG version needs a trusted signature (bundle or X-Ordo-Dag-Signature)'),
  })
  .meta({ id: 'TenantPolicy' });
export const updatePolicyBody = z
  .strictObject({ requireSignedDags: z.boolean() })
  .meta({ id: 'UpdateTenantPolicyRequest' });

export type AddTrustKeyBody = z.infer<typeof addTrustKeyBody>;
export type TrustKeyDto = z.infer<typeof trustKeySchema>;
export type TenantPolicy = z.infer<typeof tenantPolicySchema>;
