import { z } from 'zod';

export const exportQuery = z.strictObject({
  from: z
    .string()
    .min(1)
    .max(64)
    .optional()
    .describe('Runs started at or after this instant (ISO 8601, UTC or with offset)'),
  to: z.string().min(1).max(64).optional().describe('Runs started before this instant (ISO 8601)'),
  dagId: z.string().min(1).max(200).optional(),
});
export type ExportQuery = z.infer<typeof exportQuery>;
