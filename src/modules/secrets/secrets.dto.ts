import { z } from 'zod';

/** Secret names: what `${{ secrets.NAME }}` can reference. */
// At most 100 characters: the HTTP router's limit for a path parameter.
export const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,99}$/;
/** Largest secret value, in UTF-8 bytes; a larger one is 413. */
export const MAX_SECRET_BYTES = 64 * 1024;
/** Secrets per tenant. */
export const MAX_SECRETS_PER_TENANT = 1000;

export const secretParams = z.strictObject({
  name: z.string().regex(SECRET_NAME, 'letters, digits, _ and -, starting with a letter or _, at most 100'),
});

export const putSecretBody = z
  .strictObject({
    value: z
      .string()
      .min(1, 'must not be empty')
      .describe(`The secret value (at most ${MAX_SECRET_BYTES} bytes); never returned`),
  })
  .meta({ id: 'PutSecretRequest' });

export const secretMetaSchema = z
  .object({
    name: z.string(),
    createdBy: z.string(),
    updatedBy: z.string(),
    createdAt: z.iso.datetime(),
    updatedAt: z.iso.datetime(),
  })
  .meta({ id: 'SecretMetadata' });

export const putSecretResponse = secretMetaSchema.extend({ created: z.boolean() }).meta({ id: 'PutSecretResponse' });

export const secretListSchema = z.object({ items: z.array(secretMetaSchema) }).meta({ id: 'SecretList' });

export type SecretParams = z.infer<typeof secretParams>;
export type PutSecretBody = z.infer<typeof putSecretBody>;
export type SecretMetaDto = z.infer<typeof secretMetaSchema>;
