import { z } from 'zod';
import { DomainError } from '../../core/errors/domain-error';
import noop from '../../../plugins/noop';
import { definePlugin } from '../plugins/plugin';
import { validateDagDefinition, type DagIssue, type PluginLookup } from './dag-validation';
import { compileInputSchema } from './input-schema';

const strict = definePlugin({
  name: 'strict',
  description: 'test plugin with typed config',
  configSchema: z
    .strictObject({
      count: z.number().int(),
      url: z.url().optional(),
      min: z.number().optional(),
      max: z.number().optional(),
    })
    .refine((c) => c.min === undefined || c.max === undefined || c.min <= c.max, 'min must not exceed max'),
  execute: () => Promise.resolve({ status: 'succeeded', outputs: {} }),
});
const registry: PluginLookup = {
  get: (n) => ({ noop, strict })[n],
  names: () => ['noop', 'strict'],
};

function issuesOf(raw: unknown): DagIssue[] {
  try {
    validateDagDefinition(raw, registry);
  } catch (e) {
    expect(e).toBeInstanceOf(DomainError);
    expect((e as DomainError).code).toBe('DAG_INVALID');
    expect((e as DomainError).status).toBe(400);
    return ((e as DomainError).details as { issues: DagIssue[] }).issues;
  }
  throw new Error('expected DAG_INVALID');
}

const dag = (steps: unknown[], extra: Record<string, unknown> = {}) => ({ id: 'd', steps, ...extra });

describe('validateDagDefinition', () => {
  it('normalizes durations, defaults and dependsOn', () => {
    const def = validateDagDefinition(
      dag([
        { id: 'a', plugin: 'noop', timeout: '2s', retry: { maxRetries: 2, initialDelay: '500ms' } },
        { id: 'b', plugin: 'noop', dependsOn: ['a', 'a'] },
      ]),
      registry,
    );
    expect(def.steps[0]).toMatchObject({
      timeout: 2000,
      retry: { maxRetries: 2, initialDelay: 500, multiplier: 2, maxDelay: 300_000 },
      with: {},
      disabled: false,
    });
    expect(def.steps[1].dependsOn).toEqual(['a']);
  });

  it('names the step of a schema error', () => {
    expect(
      issuesOf(
        dag([
          { id: 'a', plugin: 'noop' },
          { id: 'b', plugin: 'noop', timeout: 'soon' },
        ]),
      ),
    ).toEqual([expect.objectContaining({ path: 'steps.1.timeout', step: 'b' })]);
  });

  it('reports duplicate ids, unknown and self dependencies', () => {
    const issues = issuesOf(
      dag([
        { id: 'a', plugin: 'noop', dependsOn: ['ghost'] },
        { id: 'a', plugin: 'noop' },
        { id: 'c', plugin: 'noop', dependsOn: ['c'] },
      ]),
    );
    expect(issues.map((i) => [i.step, i.message])).toEqual([
      ['a', 'duplicate step id "a"'],
      ['a', 'depends on unknown step "ghost"'],
      ['c', 'step depends on itself'],
    ]);
  });

  it('names a cycle', () => {
    const issues = issuesOf(
      dag([
        { id: 'a', plugin: 'noop', dependsOn: ['c'] },
        { id: 'b', plugin: 'noop', dependsOn: ['a'] },
        { id: 'c', plugin: 'noop', dependsOn: ['b'] },
      ]),
    );
    expect(issues).toEqual([
      { path: 'steps.0.dependsOn', step: 'a', message: expect.stringContaining('a → c → b → a') },
    ]);
  });

  it('rejects unknown plugins and config not matching the plugin schema', () => {
    const issues = issuesOf(
      dag([
        { id: 'x', plugin: 'nope' },
        { id: 'y', plugin: 'strict', with: { count: 'many', extra: 1 } },
      ]),
    );
    expect(issues[0]).toMatchObject({
      path: 'steps.0.plugin',
      step: 'x',
      message: expect.stringContaining('unknown plugin "nope"'),
    });
    expect(
      issues
        .slice(1)
        .map((i) => i.path)
        .sort(),
    ).toEqual(['steps.1.with', 'steps.1.with.count']);
  });

  it('accepts templates where the plugin expects a non-string, and still checks literal leaves', () => {
    expect(() =>
      validateDagDefinition(
        dag([
          { id: 'a', plugin: 'noop' },
          {
            id: 'b',
            plugin: 'strict',
            dependsOn: ['a'],
            with: {
              count: '${{ steps.a.outputs.n }}',
              url: 'https://${{ inputs.host }}/x',
              min: '${{ inputs.min }}',
              max: 3,
            },
          },
        ]),
        registry,
      ),
    ).not.toThrow();
    expect(issuesOf(dag([{ id: 'a', plugin: 'strict', with: { count: '$${{ literal }}' } }]))[0].path).toBe(
      'steps.0.with.count',
    );
    expect(issuesOf(dag([{ id: 'a', plugin: 'strict', with: { count: 1, min: 5, max: 2 } }]))[0].message).toContain(
      'min must not exceed max',
    );
  });

  it('rejects templates naming an unknown step or one that is not upstream, and malformed ones', () => {
    const issues = issuesOf(
      dag([
        { id: 'a', plugin: 'noop', with: { output: { v: '${{ steps.ghost.outputs.x }}' } } },
        { id: 'b', plugin: 'noop', with: { output: { v: '${{ steps.c.outputs.x }}' } } },
        {
          id: 'c',
          plugin: 'noop',
          dependsOn: ['a'],
          with: { output: { v: '${{ steps.a.outputs.x }}', w: '${{ inputs.a + 1 }}' } },
        },
        {
          id: 'd',
          plugin: 'noop',
          dependsOn: ['c'],
          with: { output: { v: '${{ steps.a.outputs.x }}', s: '${{ steps.d.outputs.x }}' } },
        },
      ]),
    );
    expect(issues.map((i) => `${i.step}: ${i.message}`)).toEqual([
      'a: template references unknown step "ghost"',
      'b: template references step "c", which is not upstream of "b" (add it to dependsOn)',
      'c: invalid template expression "inputs.a + 1": unexpected " " at offset 8',
      'd: template references step "d", which is not upstream of "d" (add it to dependsOn)',
    ]);
  });

  it('rejects bad retry and timeout values', () => {
    const issues = issuesOf(
      dag([
        { id: 'a', plugin: 'noop', timeout: 0 },
        { id: 'b', plugin: 'noop', retry: { maxRetries: 1, initialDelay: '10m', maxDelay: '1m' } },
      ]),
    );
    expect(issues.map((i) => i.path)).toEqual(['steps.0.timeout', 'steps.1.retry.initialDelay']);
    expect(issuesOf(dag([{ id: 'a', plugin: 'noop', retry: { maxRetries: -1 } }]))[0].path).toBe(
      'steps.0.retry.maxRetries',
    );
    expect(issuesOf(dag([{ id: 'a', plugin: 'noop', timeout: '8d' }]))[0].message).toContain('7 days');
    expect(issuesOf(dag([{ id: 'a', plugin: 'noop', retry: { maxRetries: 1, multiplier: 0.5 } }]))[0].path).toBe(
      'steps.0.retry.multiplier',
    );
  });

  it('rejects an inputs value that is not a usable JSON Schema', () => {
    for (const inputs of [
      { type: 'object', required: 'a' },
      { type: 'strin' },
      { type: 'string' },
      { type: 'object', properties: { a: { pattern: '(' } } },
    ]) {
      expect(issuesOf(dag([{ id: 'a', plugin: 'noop' }], { inputs }))[0]).toMatchObject({ path: 'inputs' });
    }
  });
});

describe('compileInputSchema', () => {
  it('validates run inputs against the declared schema', () => {
    const s = compileInputSchema({
      type: 'object',
      properties: { n: { type: 'integer', minimum: 1 } },
      required: ['n'],
      additionalProperties: false,
    });
    expect(s.safeParse({ n: 2 }).success).toBe(true);
    expect(s.safeParse({ n: 0 }).success).toBe(false);
    expect(s.safeParse({}).success).toBe(false);
    expect(s.safeParse({ n: 1, x: 1 }).success).toBe(false);
  });

  it('refuses a pattern with nested quantifiers (exponential on a crafted input), keeps the bounded ones', () => {
    for (const schema of [
      { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } },
      { type: 'object', patternProperties: { '^(x*)*$': { type: 'string' } } },
    ])
      expect(() => compileInputSchema(schema)).toThrow(/nested quantifiers/);
    const ok = compileInputSchema({ type: 'object', properties: { s: { type: 'string', pattern: '^[a-z]+$' } } });
    expect(ok.safeParse({ s: 'abc' }).success).toBe(true);
    expect(ok.safeParse({ s: 'ABC' }).success).toBe(false);
  });

  it('accepts any JSON object when no schema is declared, never a non-object', () => {
    expect(compileInputSchema(undefined).safeParse({ a: [1] }).success).toBe(true);
    expect(compileInputSchema(undefined).safeParse([1]).success).toBe(false);
    expect(compileInputSchema({ properties: { a: { type: 'string' } } }).safeParse('x').success).toBe(false);
  });
});
