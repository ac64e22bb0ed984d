import { z } from 'zod';
import { APPROVAL_DECISIONS } from '../dags/dag-definition';

export const decisionBody = z
  .strictObject({
    decision: z.enum(APPROVAL_DECISIONS),
    comment: z.string().max(2000).optional(),
  })
  .meta({ id: 'DecisionRequest' });

export const decisionSchema = z
  .object({
    runId: z.uuid(),
    stepId: z.string(),
    decision: z.enum(APPROVAL_DECISIONS),
    decidedBy: z.string().describe('the subject of the token that decided'),
  })
  .meta({ id: 'Decision' });

export type DecisionBody = z.infer<typeof decisionBody>;
