import { z } from 'zod';
import { CORRELATION_KEY, SIGNAL_ID, SIGNAL_NAME } from '../engine/signal-names';

export const signalBody = z
  .strictObject({
    signalId: z
      .string()
      .regex(SIGNAL_ID, 'a signal id: letters, digits, ".", "_", ":" or "-", up to 128')
      .optional()
      .describe('the id the signal is idempotent on (a UUID is generated when absent)'),
    name: z.string().regex(SIGNAL_NAME, 'a signal name: letters, digits, ".", "_", ":" or "-", up to 200'),
    correlationKey: z
      .string()
      .regex(CORRELATION_KEY, 'a correlation key: 1 to 500 characters, no control character')
      .describe('which waiting step of that name the signal is for'),
    payload: z.unknown().optional().describe('any JSON value, 64 KiB at most as canonical JSON (default null)'),
  })
  .meta({ id: 'SignalRequest' });

export const signalParams = z.strictObject({
  signalId: z.string().regex(SIGNAL_ID, 'a signal id'),
});

export const signalSchema = z
  .object({
    signalId: z.string(),
    name: z.string(),
    correlationKey: z.string(),
    payload: z.unknown(),
    sentBy: z.string().describe('the subject of the token that posted it'),
    receivedUtc: z.iso.datetime(),
    status: z.enum(['pending', 'delivered']).describe('pending: kept until a step waits for its name and key'),
    delivery: z
      .object({ runId: z.uuid(), stepId: z.string(), deliveredUtc: z.iso.datetime() })
      .nullable()
      .describe('the run and step the signal went to'),
  })
  .meta({ id: 'Signal' });

export type SignalBody = z.infer<typeof signalBody>;
