import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { DAG_ID, dagDefinition } from './dag-definition';
import { DAG_WARNING_CODES } from './dag-publish-checks';

const definitionInputJsonSchema = (() => {
  const js = z.toJSONSchema(dagDefinition, {
    target: 'draft-2020-12',
    io: 'input',
    unrepresentable: 'any',
    reused: 'inline',
  }) as Record<string, unknown>;
  // dagDefinition carries a registry id, so zod emits it under $defs; the body schema inlines it.
  const defs = js.$defs as Record<string, Record<string, unknown>> | undefined;
  const inline = { ...(defs?.DagDefinition ?? js) };
  delete inline.$schema;
  delete inline.id;
  return inline;
})();

/**
 * The publish body: a DAG definition as a JSON object, or YAML text (Content-Type application/yaml).
 * The route only checks that shape; the service validates the definition in full so that a 400
 * DAG_INVALID names the step and the problem. The OpenAPI document shows the definition schema.
 */
export const publishDagBody = z
  .custom<unknown>(
    (v) => typeof v === 'string' || (typeof v === 'object' && v !== null && !Array.isArray(v)),
    'expected a DAG definition: a JSON object, or YAML text with Content-Type application/yaml',
  )
  .meta({ ...definitionInputJsonSchema, description: 'A DAG definition (JSON object, or the same as YAML text)' });

export const dagStatusSchema = z.enum(['active', 'disabled']);

export const signatureSchema = z.object({
  kid: z.string(),
  signer: z.string(),
  alg: z.string(),
  source: z.enum(['api', 'bundle']),
});

export const dagWarningSchema = z
  .object({
    code: z.enum(DAG_WARNING_CODES),
    stepId: z.string(),
    path: z.string().describe('Where in the definition, dotted: steps.0.with.args.1'),
    message: z.string(),
  })
  .meta({
    id: 'DagWarning',
    description:
      'Something that publishes but may fail at run time (a template reading an input the schema does not require, a cli argument naming a host the egress does not allow)',
  });

export const publishedDagSchema = z
  .object({
    dagId: z.string(),
    version: z.number().int(),
    contentHash: z.string().describe('SHA-256 hex of the RFC 8785 canonical JSON of the normalized definition'),
    status: dagStatusSchema,
    created: z.boolean().describe('false when identical content was already published (200)'),
    warnings: z
      .array(dagWarningSchema)
      .describe('What publishing found that may fail at run time; stored with the version'),
  })
  .meta({ id: 'PublishedDag' });

export const dagVersionSummarySchema = z
  .object({
    dagId: z.string(),
    version: z.number().int(),
    status: dagStatusSchema,
    contentHash: z.string(),
    sourceFormat: z.enum(['json', 'yaml']),
    owner: z.string(),
    signature: signatureSchema.nullable(),
    bundleHash: z.string().nullable(),
    createdAt: z.iso.datetime(),
    disabledAt: z.iso.datetime().nullable(),
  })
  .meta({ id: 'DagVersionSummary' });

export const dagVersionSchema = dagVersionSummarySchema
  .extend({
    definition: z
      .record(z.string(), z.unknown())
      .describe('The normalized definition (durations in ms, defaults filled)'),
    statusHistory: z.array(z.object({ status: dagStatusSchema, actor: z.string(), changedAt: z.iso.datetime() })),
    warnings: z.array(dagWarningSchema).describe('What publishing found that may fail at run time'),
  })
  .meta({ id: 'DagVersion' });

export const dagListSchema = z
  .object({ items: z.array(dagVersionSummarySchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'DagVersionList' });

export const dagListQuery = z.strictObject({
  limit: queryInt(1, 500, 50),
  pageToken: z.string().max(1000).optional(),
  status: dagStatusSchema.optional(),
  dagId: z.string().regex(DAG_ID).optional(),
});

export const dagParams = z.strictObject({ dagId: z.string().regex(DAG_ID, 'not a DAG id') });
export const dagVersionParams = dagParams.extend({
  version: queryInt(1, 2_147_483_647),
});
export const graphQuery = z.strictObject({ format: z.enum(['json', 'dot']).default('json') });

export const dagGraphSchema = z
  .object({
    nodes: z.array(
      z.object({
        id: z.string(),
        plugin: z.string(),
        disabled: z.boolean(),
        when: z.string().optional().describe('the condition (CEL); false skips the step'),
        trigger: z.string().optional().describe('the trigger rule, when not all_success'),
        map: z.string().optional().describe("a map step's list: it runs once per element"),
        maxParallel: z.number().int().optional().describe("how many of a map step's instances run at once"),
        preconditions: z
          .object({ expressions: z.array(z.string()), onViolation: z.enum(['wait', 'skip', 'fail']) })
          .optional()
          .describe('expressions (CEL) that must hold before the step runs, and what happens while they do not'),
        subDag: z
          .object({ dag: z.string(), version: z.number().int() })
          .optional()
          .describe('the DAG version a `dag` step runs as a child run'),
      }),
    ),
    edges: z.array(
      z.object({
        from: z.string(),
        to: z.string(),
        status: z
          .string()
          .optional()
          .describe('the named status `from` must end with for this edge to count as succeeded'),
      }),
    ),
    order: z.array(z.string()).describe('Dispatch order: topological, ties broken lexically by step id'),
  })
  .meta({ id: 'DagGraph' });

export type DagListQuery = z.infer<typeof dagListQuery>;
export type DagParams = z.infer<typeof dagParams>;
export type DagVersionParams = z.infer<typeof dagVersionParams>;
export type GraphQuery = z.infer<typeof graphQuery>;
export type PublishedDagDto = z.infer<typeof publishedDagSchema>;
export type DagVersionDto = z.infer<typeof dagVersionSchema>;
export type DagVersionSummaryDto = z.infer<typeof dagVersionSummarySchema>;
