import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { BUNDLE_NAME } from './bundle-format';

export const importBundleBody = z
  .strictObject({
    bundle: z.base64().describe('The bundle archive (.tar.gz), base64'),
    signature: z
      .string()
      .min(1)
      .max(4096)
      .describe('The detached JWS over manifest.json (the content of <bundle>.tar.gz.sig)'),
  })
  .meta({ id: 'ImportBundleRequest' });

export const bundleSchema = z
  .object({
    bundleHash: z.string().describe('SHA-256 hex of manifest.json'),
    name: z.string(),
    version: z.string(),
    owner: z.string(),
    created: z.iso.datetime(),
    kid: z.string().describe('The trusted key that signed it'),
    importedBy: z.string(),
    importedAt: z.iso.datetime(),
    dags: z.array(z.object({ path: z.string(), dagId: z.string(), version: z.number().int() })),
    scripts: z.array(z.string()),
    files: z.array(z.object({ path: z.string(), sha256: z.string(), size: z.number().int() })),
  })
  .meta({ id: 'Bundle' });

export const importedBundleSchema = bundleSchema
  .extend({ imported: z.boolean().describe('false when this bundle was already imported (nothing changed)') })
  .meta({ id: 'ImportedBundle' });

export const bundleParams = z.strictObject({
  bundleHash: z.string().regex(/^[0-9a-f]{64}$/, 'a bundle hash (64 lowercase hex)'),
});
export const bundleListQuery = z.strictObject({
  limit: queryInt(1, 500, 50),
  pageToken: z.string().max(500).optional(),
  name: z.string().regex(BUNDLE_NAME).optional(),
});
export const bundleListSchema = z
  .object({ items: z.array(bundleSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'BundleList' });

export type ImportBundleBody = z.infer<typeof importBundleBody>;
export type BundleDto = z.infer<typeof bundleSchema>;
export type ImportedBundleDto = z.infer<typeof importedBundleSchema>;
