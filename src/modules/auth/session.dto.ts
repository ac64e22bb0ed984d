import { z } from 'zod';

export const openSessionBody = z
  .strictObject({
    token: z.string().min(1).max(4096).describe('a tenant or platform token (worker tokens are refused)'),
  })
  .meta({ id: 'OpenSessionRequest' });

export type OpenSessionBody = z.infer<typeof openSessionBody>;

export const sessionSchema = z
  .object({
    tenantId: z.string().nullable().describe("the token's tenant; null for a platform operator's session"),
    subject: z.string(),
    scopes: z.array(z.string()),
    expiresAt: z.iso.datetime().describe("when the session ends: the token's expiry, at most 12 hours after sign-in"),
    csrfToken: z.string().describe('sent back as X-CSRF-Token on every state-changing request made with the cookie'),
  })
  .meta({ id: 'ConsoleSession' });
