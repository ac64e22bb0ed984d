import type { DomainError } from '../../core/errors/domain-error';
import { PluginRegistry } from '../plugins/plugin-registry';
import { readInput } from './dag-publish-checks';
import { checkDagDefinition, type DagIssue } from './dag-validation';

const plugins = new PluginRegistry();

function issuesOf(raw: unknown): DagIssue[] {
  try {
    checkDagDefinition(raw, plugins);
  } catch (e) {
    expect((e as DomainError).code).toBe('DAG_INVALID');
    return ((e as DomainError).details as { issues: DagIssue[] }).issues;
  }
  throw new Error('expected DAG_INVALID');
}

const withInputs = (inputs: Record<string, unknown>, steps: unknown[]) => ({ id: 'd', inputs, steps });
const nInput = { type: 'object', properties: { n: { type: 'integer' }, s: { type: 'string' } }, required: ['n', 's'] };

describe('publish checks: template types against the plugin schema', () => {
  it('refuses a whole-string integer input in a cli argument, naming the step, the path and both types', () => {
    const issues = issuesOf(
      withInputs(nInput, [{ id: 'build', plugin: 'cli', with: { command: 'echo', args: ['-n', '${{ inputs.n }}'] } }]),
    );
    expect(issues).toEqual([
      {
        path: 'steps.0.with.args.1',
        step: 'build',
        code: 'TEMPLATE_TYPE_MISMATCH',
        message:
          'cli config expects string here, but ${{ inputs.n }} (declared integer by the inputs schema) yields integer',
      },
    ]);
  });

  it('accepts the same input inside a longer string, which yields a string', () => {
    const r = checkDagDefinition(
      withInputs(nInput, [{ id: 'b', plugin: 'cli', with: { command: 'echo', args: ['n=${{ inputs.n }}'] } }]),
      plugins,
    );
    expect(r.warnings).toEqual([]);
  });

  it('refuses text around a template where a boolean is expected, and a secret where a number is', () => {
    const issues = issuesOf(
      withInputs(nInput, [
        { id: 'a', plugin: 'noop', with: { retryable: 'x${{ inputs.s }}' } },
        { id: 'b', plugin: 'script', with: { code: 'return 1', memoryLimitMb: 64, maxOutputBytes: 10 } },
        { id: 'c', plugin: 'noop', with: { retryable: '${{ secrets.FLAG }}' } },
      ]),
    );
    expect(issues.map((i) => [i.step, i.path, i.code])).toEqual([
      ['a', 'steps.0.with.retryable', 'TEMPLATE_TYPE_MISMATCH'],
      ['c', 'steps.2.with.retryable', 'TEMPLATE_TYPE_MISMATCH'],
    ]);
    expect(issues[0].message).toBe('noop config expects boolean here, but text around a template yields a string');
  });

  it('refuses a type no branch of a union takes, and accepts one a branch takes whatever its value', () => {
    const schema = {
      type: 'object',
      properties: { b: { type: 'boolean' }, n: { type: 'integer' } },
      required: ['b', 'n'],
    };
    const issues = issuesOf(withInputs(schema, [{ id: 'a', plugin: 'noop', with: { sleepMs: '${{ inputs.b }}' } }]));
    expect(issues).toEqual([
      expect.objectContaining({
        path: 'steps.0.with.sleepMs',
        message: expect.stringMatching(/expects number or string/),
      }),
    ]);
    expect(
      checkDagDefinition(
        withInputs(schema, [{ id: 'a', plugin: 'noop', with: { sleepMs: '${{ inputs.n }}' } }]),
        plugins,
      ).warnings,
    ).toEqual([]);
  });

  it('refuses an input whose type is outside an enum, and leaves values it cannot know alone', () => {
    const schema = {
      type: 'object',
      properties: { n: { type: 'integer' }, s: { type: 'string' } },
      required: ['n', 's'],
    };
    const at = (v: string) =>
      withInputs(schema, [
        { id: 'h', plugin: 'http', egress: ['example.com'], with: { url: 'https://example.com/', responseType: v } },
      ]);
    expect(issuesOf(at('${{ inputs.n }}'))[0].message).toMatch(/expects one of "json", "text", "auto"/);
    expect(checkDagDefinition(at('${{ inputs.s }}'), plugins).warnings).toEqual([]);
  });

  it('knows nothing of upstream outputs or of inputs without a schema', () => {
    const r = checkDagDefinition(
      {
        id: 'd',
        steps: [
          { id: 'a', plugin: 'noop', with: { output: { n: 1 } } },
          {
            id: 'b',
            plugin: 'cli',
            dependsOn: ['a'],
            with: { command: 'echo', args: ['${{ steps.a.outputs.n }}', '${{ inputs.x }}'] },
          },
        ],
      },
      plugins,
    );
    expect(r.warnings).toEqual([]);
  });
});

describe('publish checks: inputs the templates read', () => {
  it('refuses an undeclared input, a member of a string, and a key of an array', () => {
    const schema = {
      type: 'object',
      properties: { name: { type: 'string' }, list: { type: 'array', items: { type: 'string' } } },
      required: ['name', 'list'],
    };
    const issues = issuesOf(
      withInputs(schema, [
        { id: 'a', plugin: 'noop', with: { output: { x: '${{ inputs.nmae }}' } } },
        { id: 'b', plugin: 'noop', with: { output: { x: '${{ inputs.name.first }}' } } },
        { id: 'c', plugin: 'noop', with: { output: { x: '${{ inputs.list.size }}', y: '${{ inputs.list[0] }}' } } },
      ]),
    );
    expect(issues.map((i) => [i.step, i.path, i.code])).toEqual([
      ['a', 'steps.0.with.output.x', 'INPUT_UNDECLARED'],
      ['b', 'steps.1.with.output.x', 'INPUT_UNDECLARED'],
      ['c', 'steps.2.with.output.x', 'INPUT_UNDECLARED'],
    ]);
    expect(issues[0].message).toBe(
      'template reads inputs.nmae, which the inputs schema does not declare (inputs declares name, list)',
    );
  });

  it('warns about a declared input that is not required, also when it has a default', () => {
    const schema = {
      type: 'object',
      properties: { ms: { type: 'integer' }, tag: { type: 'string', default: 'v' }, n: { type: 'integer' } },
      required: ['n'],
    };
    const r = checkDagDefinition(
      withInputs(schema, [
        {
          id: 'a',
          plugin: 'noop',
          with: { sleepMs: '${{ inputs.ms }}', output: { t: '${{ inputs.tag }}-${{ inputs.n }}' } },
        },
      ]),
      plugins,
    );
    expect(r.warnings).toEqual([
      {
        code: 'INPUT_NOT_REQUIRED',
        stepId: 'a',
        path: 'steps.0.with.sleepMs',
        message:
          'template reads inputs.ms, which the inputs schema declares but does not require: a run without it fails with TEMPLATE_UNRESOLVED (add it to required)',
      },
      expect.objectContaining({
        path: 'steps.0.with.output.t',
        message: expect.stringMatching(/inputs\.tag,.*its default is not filled into run inputs/),
      }),
    ]);
  });

  it('follows $ref, nested objects and additionalProperties; stops at combinators and open objects', () => {
    const schema = {
      type: 'object',
      $defs: { conf: { type: 'object', properties: { port: { type: 'integer' } }, required: ['port'] } },
      properties: {
        conf: { $ref: '#/$defs/conf' },
        tags: { type: 'object', additionalProperties: { type: 'string' } },
        any: { type: 'object' },
        either: { anyOf: [{ type: 'string' }, { type: 'integer' }] },
      },
      required: ['conf', 'tags', 'any', 'either'],
    };
    expect(readInput(schema, ['conf', 'port'])).toEqual({ optional: undefined, type: 'integer' });
    expect(readInput(schema, ['conf', 'host']).undeclared?.message).toMatch(/inputs\.conf\.host/);
    expect(readInput(schema, ['tags', 'team'])).toEqual({
      optional: { at: ['tags', 'team'], hasDefault: false },
      type: 'string',
    });
    expect(readInput(schema, ['any', 'deep', 'x'])).toEqual({ optional: undefined });
    expect(readInput(schema, ['either', 'x'])).toEqual({ optional: undefined });
    expect(readInput(schema, ['constructor']).undeclared).toBeDefined();
    expect(readInput({ type: 'object' }, ['x'])).toEqual({ optional: undefined });
  });
});

describe('publish checks: egress of http and cli steps', () => {
  const http = (url: string, egress?: string[]) => ({
    id: 'd',
    inputs: {
      type: 'object',
      properties: { id: { type: 'string' }, base: { type: 'string' } },
      required: ['id', 'base'],
    },
    steps: [{ id: 'call', plugin: 'http', ...(egress ? { egress } : {}), with: { url } }],
  });

  it('refuses a literal URL whose host no egress entry allows', () => {
    const issues = issuesOf(http('https://api.example.com/items'));
    expect(issues).toEqual([
      {
        path: 'steps.0.with.url',
        step: 'call',
        code: 'EGRESS_NOT_ALLOWED',
        message:
          'http url reaches api.example.com:443, which the step cannot reach: it declares no egress (add "api.example.com" to the step\'s egress); the call would fail with EGRESS_DENIED',
      },
    ]);
    expect(issuesOf(http('http://127.0.0.1:8080/x', ['127.0.0.1:9090']))[0].message).toMatch(
      /127\.0\.0\.1:8080, which no entry of the step's egress allows/,
    );
  });

  it('checks the host of a URL templated only after it, and not one templated before', () => {
    expect(issuesOf(http('https://api.example.com/items/${{ inputs.id }}'))[0].code).toBe('EGRESS_NOT_ALLOWED');
    for (const url of ['${{ inputs.base }}/items', 'https://${{ inputs.base }}/x', 'https://api.example.com'])
      expect(() => checkDagDefinition(http(url, ['*.example.com', 'api.example.com']), plugins)).not.toThrow();
  });

  it('refuses a literal URL that is not http(s) or carries credentials', () => {
    expect(issuesOf(http('ftp://example.com/x', ['example.com']))[0].code).toBe('URL_INVALID');
    expect(issuesOf(http('https://u:p@example.com/x', ['example.com']))[0].code).toBe('URL_INVALID');
    expect(issuesOf(http('not a url'))[0].code).toBe('URL_INVALID');
  });

  it('warns about a URL in a cli argument or variable that the egress does not allow', () => {
    const r = checkDagDefinition(
      {
        id: 'd',
        steps: [
          {
            id: 'get',
            plugin: 'cli',
            egress: ['allowed.example.com'],
            with: {
              command: 'curl',
              args: ['-fsS', 'https://allowed.example.com/a', '--url=https://other.example.com:8443/b'],
              env: { MIRROR: 'http://mirror.example.org' },
            },
          },
        ],
      },
      plugins,
    );
    expect(r.warnings.map((w) => [w.code, w.path])).toEqual([
      ['EGRESS_NOT_DECLARED', 'steps.0.with.args.2'],
      ['EGRESS_NOT_DECLARED', 'steps.0.with.env.MIRROR'],
    ]);
  });
});
