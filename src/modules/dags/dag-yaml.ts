import { isNode, parseDocument, visit } from 'yaml';
import { badRequest } from '../../core/errors/domain-error';
import { yamlNewlineHint } from '../../core/http/content-types';

/** Largest YAML definition accepted (the HTTP body limit applies as well). */
export const MAX_YAML_BYTES = 1024 * 1024;
/** Alias expansions allowed per document: enough for reuse, too few for a "billion laughs". */
export const MAX_YAML_ALIASES = 100;

/**
 * Parses a YAML DAG definition as plain data: YAML 1.2 core schema (strings, numbers, booleans,
 * null, maps, sequences), no custom or language tags, duplicate keys rejected, aliases limited,
 * merge keys not interpreted. Anything else is a 400 YAML_INVALID naming the line.
 */
export function parseDagYaml(text: string): unknown {
  if (Buffer.byteLength(text, 'utf8') > MAX_YAML_BYTES) {
    throw badRequest('YAML_INVALID', `YAML definition larger than ${MAX_YAML_BYTES} bytes`);
  }
  const doc = parseDocument(text, {
    version: '1.2',
    schema: 'core',
    customTags: [],
    uniqueKeys: true,
    merge: false,
    strict: true,
    prettyErrors: true,
    stringKeys: true,
  });
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) {
    const line = problem.linePos?.[0]?.line;
    const hint = yamlNewlineHint(text);
    throw badRequest(
      'YAML_INVALID',
      `YAML${line ? ` line ${line}` : ''}: ${problem.message.split('\n')[0]}${hint ? ` (${hint})` : ''}`,
    );
  }
  visit(doc, (_key, node) => {
    if (isNode(node) && node.tag !== undefined && !CORE_TAGS.has(node.tag)) {
      const line = node.range ? lineOf(text, node.range[0]) : undefined;
      throw badRequest(
        'YAML_INVALID',
        `YAML${line ? ` line ${line}` : ''}: tag ${node.tag} is not allowed (plain data only)`,
      );
    }
  });
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: MAX_YAML_ALIASES });
  } catch (e) {
    throw badRequest('YAML_INVALID', `YAML: ${(e as Error).message.split('\n')[0]}`);
  }
  assertJson(value, 0);
  return value;
}

const CORE_TAGS = new Set(['str', 'int', 'float', 'bool', 'null', 'map', 'seq'].map((t) => `tag:yaml.org,2002:${t}`));

function lineOf(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

function assertJson(v: unknown, depth: number): void {
  if (depth > 200) throw badRequest('YAML_INVALID', 'YAML nested too deeply');
  if (typeof v === 'number' && !Number.isFinite(v))
    throw badRequest('YAML_INVALID', 'YAML: .inf and .nan have no JSON form');
  if (Array.isArray(v)) for (const x of v) assertJson(x, depth + 1);
  else if (v !== null && typeof v === 'object') {
    const proto: unknown = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null)
      throw badRequest('YAML_INVALID', 'YAML: only maps, sequences and scalars are allowed');
    for (const x of Object.values(v)) assertJson(x, depth + 1);
  }
}
