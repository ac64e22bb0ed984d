import fc from 'fast-check';
import { stringify as yamlStringify } from 'yaml';
import { DAG_ID, STEP_ID } from '../../../src/modules/dags/dag-definition';
import { HOSTILE_STRINGS, PROTOTYPE_KEYS, prototypeKey } from './arbitrary-from-schema';

/**
 * Hostile DAG documents, as text (JSON or YAML): deep nesting, aliases that expand
 * exponentially, duplicate keys, unicode step ids, out-of-range numbers, and random or truncated
 * text. Shared by the DAG parser fuzz tests (functions directly and over HTTP).
 */
export interface DagDocument {
  name: string;
  text: string;
  type: 'application/json' | 'application/yaml';
  /** Must be refused (4xx); otherwise it may also be a valid definition. */
  refuse: boolean;
}

const step = (id: string, extra = '') => `{"id":${JSON.stringify(id)},"plugin":"noop"${extra}}`;
const json = (steps: string[], extra = '') => `{"id":"fuzz-dag"${extra},"steps":[${steps.join(',')}]}`;

export function deepJson(depth: number, where: 'with' | 'root' | 'steps' = 'with'): string {
  const nest = `${'['.repeat(depth)}1${']'.repeat(depth)}`;
  if (where === 'root') return nest;
  if (where === 'steps') return `{"id":"fuzz-dag","steps":${nest}}`;
  return json([step('s1', `,"with":{"output":{"deep":${nest}}}`)]);
}

export function deepYaml(depth: number, style: 'flow' | 'block'): string {
  if (style === 'flow')
    return `id: fuzz-dag\nsteps:\n  - id: s1\n    plugin: noop\n    with:\n      output:\n        deep: ${'['.repeat(depth)}1${']'.repeat(depth)}\n`;
  let out = 'id: fuzz-dag\nsteps:\n  - id: s1\n    plugin: noop\n    with:\n      output:\n';
  for (let i = 0; i < depth; i++) out += `${' '.repeat(8 + i)}k:\n`;
  return out + `${' '.repeat(8 + depth)}v: 1\n`;
}

/** The classic "billion laughs": nine levels of nine aliases each. */
export function billionLaughs(levels = 9): string {
  let out = 'a0: &a0 "lol"\n';
  for (let i = 1; i <= levels; i++)
    out += `a${i}: &a${i} [${Array.from({ length: 9 }, () => `*a${i - 1}`).join(', ')}]\n`;
  return `${out}id: fuzz-dag\nsteps:\n  - id: s1\n    plugin: noop\n    with:\n      output:\n        boom: *a${levels}\n`;
}

/** Documents every parser must refuse with a 4xx, never a crash or a 5xx. */
export function hostileDocuments(): DagDocument[] {
  const docs: DagDocument[] = [];
  const add = (name: string, text: string, type: DagDocument['type'] = 'application/json', refuse = true) =>
    docs.push({ name, text, type, refuse });
  for (const d of [1_000, 10_000, 100_000]) {
    add(`JSON nested ${d} levels under a step's with`, deepJson(d));
    add(`JSON nested ${d} levels at the root`, deepJson(d, 'root'));
    add(`JSON nested ${d} levels as steps`, deepJson(d, 'steps'));
    add(`YAML flow sequences nested ${d} levels`, deepYaml(d, 'flow'), 'application/yaml');
  }
  add('YAML block mappings nested 1000 levels', deepYaml(1_000, 'block'), 'application/yaml');
  add('YAML billion laughs (9^9 expansions)', billionLaughs(), 'application/yaml');
  add('YAML aliases just past the limit', billionLaughs(3), 'application/yaml');
  add('YAML with a duplicate key', 'id: a\nid: b\nsteps:\n  - id: s1\n    plugin: noop\n', 'application/yaml');
  add(
    'YAML with a duplicate step key',
    'id: a\nsteps:\n  - id: s1\n    id: s2\n    plugin: noop\n',
    'application/yaml',
  );
  add('YAML with a custom tag', 'id: !!js/function "function(){}"\nsteps: []\n', 'application/yaml');
  add('YAML with a binary tag', 'id: a\nsteps:\n  - id: s1\n    plugin: !!binary aGVsbG8=\n', 'application/yaml');
  add(
    'YAML with a merge key',
    'base: &b {plugin: noop}\nid: a\nsteps:\n  - <<: *b\n    id: s1\n    dependsOn: [s1]\n',
    'application/yaml',
  );
  add(
    'YAML with .inf and .nan',
    'id: a\nsteps:\n  - id: s1\n    plugin: noop\n    timeout: .inf\n    with: {output: {n: .nan}}\n',
    'application/yaml',
  );
  add(
    'YAML with 1e309',
    'id: a\nsteps:\n  - id: s1\n    plugin: noop\n    with: {output: {n: 1e309}}\n',
    'application/yaml',
  );
  add('YAML that is a bare scalar', '42\n', 'application/yaml');
  add('YAML with several documents', 'id: a\n---\nid: b\n', 'application/yaml');
  add('YAML with a tab indent', 'id: a\nsteps:\n\t- id: s1\n', 'application/yaml');
  add('YAML with a NUL byte', 'id: a\u0000\nsteps: []\n', 'application/yaml');
  add('YAML with a lone surrogate', 'id: a\nsteps:\n  - id: "\ud800"\n    plugin: noop\n', 'application/yaml');
  add('JSON with 1e309 in a step config', json([step('s1', ',"with":{"output":{"n":1e309}}')]));
  add('JSON with 1e309 as a timeout', json([step('s1', ',"timeout":1e309')]));
  add('JSON with -1e309 as maxRetries', json([step('s1', ',"retry":{"maxRetries":-1e309}')]));
  add('JSON with 1e-400 as a concurrency', json([step('s1', ',"concurrency":1e-400')]));
  add('JSON with a 2^64 concurrency', json([step('s1', ',"concurrency":18446744073709551616')]));
  add('JSON with a cycle', json([step('a', ',"dependsOn":["b"]'), step('b', ',"dependsOn":["a"]')]));
  add('JSON with a self dependency', json([step('a', ',"dependsOn":["a"]')]));
  add('JSON with 1001 steps', json(Array.from({ length: 1001 }, (_, i) => step(`s${i}`))));
  add('JSON with duplicate step ids', json([step('s1'), step('s1')]));
  add('JSON with an unknown plugin', json([`{"id":"s1","plugin":"../../etc/passwd"}`]));
  add('JSON with a __proto__ key', json([step('s1', ',"__proto__":{"plugin":"cli"}')]));
  add('JSON with a constructor key in with', json([step('s1', ',"with":{"constructor":{"prototype":{"x":1}}}')]));
  add(
    'JSON with a template into an unknown step',
    json([step('s1', ',"with":{"output":{"x":"${{ steps.nope.outputs.x }}"}}')]),
  );
  add('JSON with an unterminated template', json([step('s1', ',"with":{"output":{"x":"${{ steps.s0.outputs"}}')]));
  add(
    'JSON with a template 100k characters long',
    json([step('s1', `,"with":{"output":{"x":"\${{ ${'a.'.repeat(50_000)}b }}"}}`)]),
  );
  add(
    'JSON with an inputs schema that is not a schema',
    `{"id":"a","inputs":{"type":"nonsense","$ref":"http://127.0.0.1:1/x"},"steps":[${step('s1')}]}`,
  );
  add(
    'JSON with a recursive inputs schema',
    `{"id":"a","inputs":{"$defs":{"x":{"$ref":"#/$defs/x"}},"$ref":"#/$defs/x"},"steps":[${step('s1')}]}`,
  );
  add('JSON that is truncated', json([step('s1')]).slice(0, 30));
  add('JSON that is an array', '[1,2,3]');
  add('JSON that is a string', '"id: a"');
  add('JSON that is null', 'null');
  add('an empty body', '');
  for (const s of HOSTILE_STRINGS) {
    add(`JSON with step id ${JSON.stringify(s).slice(0, 40)}`, json([step(s)]), 'application/json', !STEP_ID.test(s));
    add(
      `JSON with DAG id ${JSON.stringify(s).slice(0, 40)}`,
      `{"id":${JSON.stringify(s)},"steps":[${step('s1')}]}`,
      'application/json',
      !DAG_ID.test(s),
    );
  }
  for (const k of PROTOTYPE_KEYS) {
    if (!HOSTILE_STRINGS.includes(k)) {
      add(`JSON with step id ${k}`, json([step(k)]), 'application/json', !STEP_ID.test(k));
      add(`JSON with DAG id ${k}`, `{"id":"${k}","steps":[${step('s1')}]}`, 'application/json', !DAG_ID.test(k));
    }
    add(
      `JSON with a config key ${k}`,
      json([step('s1', `,"with":{"output":{"${k}":"${k}"}}`)]),
      'application/json',
      false,
    );
    add(
      `JSON with an input named ${k}`,
      `{"id":"a","inputs":{"type":"object","properties":{"${k}":{"type":"string"}},"required":["${k}"]},"steps":[${step('s1')}]}`,
      'application/json',
      false,
    );
  }
  for (const id of ['стъпка', '步骤', 'ステップ', '😀', 'a\u202eb', 'İ', 'ǅ', 'e\u0301', '\u0660']) {
    add(`JSON with unicode step id ${id}`, json([step(id)]));
    add(`YAML with unicode step id ${id}`, `id: a\nsteps:\n  - id: "${id}"\n    plugin: noop\n`, 'application/yaml');
  }
  return docs;
}

/**
 * Documents whose ids, step ids, input names, config keys and values are prototype member names
 * (keys are own properties, as JSON.parse makes them, `__proto__` included).
 */
const prototypeNamesDocument: fc.Arbitrary<Omit<DagDocument, 'refuse'>> = fc
  .tuple(prototypeKey, prototypeKey, prototypeKey, prototypeKey, fc.boolean())
  .map(([dagId, stepId, key, value, yaml]) => {
    const def = {
      id: dagId,
      inputs: { type: 'object', properties: { [key]: { type: 'string' } }, required: [key] },
      steps: [{ id: stepId, plugin: 'noop', with: { output: { [key]: value, ref: `\${{ inputs.${key} }}` } } }],
    };
    return yaml
      ? { name: 'prototype names', text: yamlStringify(def), type: 'application/yaml' as const }
      : { name: 'prototype names', text: JSON.stringify(def), type: 'application/json' as const };
  });

/** Random text, bytes as text, truncated or mutated variants of a valid document, prototype member names. */
export const randomDocument: fc.Arbitrary<Omit<DagDocument, 'refuse'>> = fc.oneof(
  prototypeNamesDocument,
  fc
    .string({ unit: 'binary', maxLength: 400 })
    .map((text) => ({ name: 'random text', text, type: 'application/yaml' as const })),
  fc
    .string({ unit: 'binary', maxLength: 400 })
    .map((text) => ({ name: 'random text', text, type: 'application/json' as const })),
  fc
    .jsonValue({ maxDepth: 4 })
    .map((v) => ({ name: 'random JSON', text: JSON.stringify(v), type: 'application/json' as const })),
  fc.jsonValue({ maxDepth: 4 }).map((v) => ({
    name: 'random JSON as a steps list',
    text: `{"id":"fuzz-dag","steps":${JSON.stringify(Array.isArray(v) ? v : [v])}}`,
    type: 'application/json' as const,
  })),
  fc
    .tuple(fc.integer({ min: 1, max: 120 }), fc.constantFrom('application/json' as const, 'application/yaml' as const))
    .map(([cut, type]) => {
      const full =
        type === 'application/json'
          ? json([step('s1', ',"with":{"output":{"a":1}}'), step('s2', ',"dependsOn":["s1"]')])
          : 'id: fuzz-dag\nsteps:\n  - id: s1\n    plugin: noop\n  - id: s2\n    plugin: noop\n    dependsOn: [s1]\n';
      return { name: 'truncated valid document', text: full.slice(0, Math.min(cut, full.length - 1)), type };
    }),
  fc
    .tuple(fc.array(fc.constantFrom(...'{}[]:,"\'&*!-? \n\t#|>%@`'.split('')), { maxLength: 60 }), fc.boolean())
    .map(([chars, yaml]) => ({
      name: 'structural noise',
      text: chars.join(''),
      type: yaml ? ('application/yaml' as const) : ('application/json' as const),
    })),
);

/** A document recorded in the regression corpus: `{ text, type, name? }`. */
export function corpusDocument(input: unknown): Omit<DagDocument, 'refuse'> {
  const d = input as Partial<DagDocument>;
  if (typeof d.text !== 'string' || (d.type !== 'application/json' && d.type !== 'application/yaml')) {
    throw new Error(
      `a dag-documents corpus input is { text, type: application/json | application/yaml }: ${JSON.stringify(input)}`,
    );
  }
  return { name: d.name ?? 'corpus document', text: d.text, type: d.type };
}
