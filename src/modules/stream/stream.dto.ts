import { z } from 'zod';
import { parseCursor } from './stream-cursor';

const cursor = z
  .string()
  .max(48)
  .refine((s) => parseCursor(s) !== undefined, 'is not a stream cursor');
const RUN_STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled'] as const;
const STEP_STATUSES = ['pending', 'retrying', 'orphaned', 'skipped', 'waiting'] as const;
export const EVENT_STATUSES = [...RUN_STATUSES, ...STEP_STATUSES] as const;

export const subscriptionFilter = z.strictObject({
  dagId: z.string().min(1).max(200).optional(),
  runId: z.uuid().optional(),
  status: z.array(z.enum(EVENT_STATUSES)).min(1).max(EVENT_STATUSES.length).optional(),
});
export type SubscriptionFilter = z.infer<typeof subscriptionFilter>;

/** Messages a client sends. Anything else is answered with an error (or, before auth, close 4400). */
export const clientMessage = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('auth'),
    token: z.string().min(1).max(4096),
    tenantId: z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/),
    since: cursor.optional(),
  }),
  z.strictObject({
    type: z.literal('subscribe'),
    id: z.string().regex(/^[A-Za-z0-9._:-]{1,64}$/),
    filter: subscriptionFilter.default({}),
  }),
  z.strictObject({ type: z.literal('unsubscribe'), id: z.string().regex(/^[A-Za-z0-9._:-]{1,64}$/) }),
  z.strictObject({ type: z.literal('ping') }),
]);
export type ClientMessage = z.infer<typeof clientMessage>;

export const sinceQuery = cursor;

/** Close codes the server uses (RFC 6455 private range 4000–4999). */
export const CLOSE = {
  /** Token missing, invalid, expired or revoked while connected. */
  UNAUTHORIZED: 4001,
  /** Token of another tenant, missing scope, disabled tenant. */
  FORBIDDEN: 4003,
  /** The client does not read fast enough: its send buffer passed the cap. */
  SLOW_CONSUMER: 4008,
  /** A malformed message before authentication (afterwards malformed messages get an error message). */
  BAD_MESSAGE: 4400,
  /** No auth message within the deadline. */
  AUTH_TIMEOUT: 4408,
  /** The server is shutting down. */
  GOING_AWAY: 1001,
} as const;

/** One run event as the stream delivers it. */
export interface StreamEvent {
  type: 'event';
  subscriptions: string[];
  cursor: string;
  event: 'run.started' | 'run.updated' | 'run.completed' | 'run.failed' | 'run.cancelled' | 'step.updated';
  eventType: string;
  tenant: string;
  dagId: string;
  runId: string;
  seq: number;
  stepId: string | null;
  attempt: number | null;
  status: string | null;
  timestamp: string;
  traceId: string;
}
