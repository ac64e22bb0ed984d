import { DomainError } from '../../core/errors/domain-error';
import { parseDagYaml } from './dag-yaml';

function yamlError(text: string): DomainError {
  try {
    parseDagYaml(text);
  } catch (e) {
    expect(e).toBeInstanceOf(DomainError);
    expect((e as DomainError).code).toBe('YAML_INVALID');
    return e as DomainError;
  }
  throw new Error('expected YAML_INVALID');
}

describe('parseDagYaml', () => {
  it('parses plain YAML into JSON data, keeping dates and yes/no as strings (YAML 1.2 core)', () => {
    expect(
      parseDagYaml('id: etl\nwhen: 2001-12-14\nflag: yes\nn: 0x10\nsteps:\n  - id: a\n    plugin: noop\n'),
    ).toEqual({
      id: 'etl',
      when: '2001-12-14',
      flag: 'yes',
      n: 16,
      steps: [{ id: 'a', plugin: 'noop' }],
    });
  });

  it('allows a few aliases', () => {
    expect(parseDagYaml('a: &x {k: 1}\nb: *x')).toEqual({ a: { k: 1 }, b: { k: 1 } });
  });

  it('rejects duplicate keys naming the line', () => {
    expect(yamlError('id: a\nsteps: []\nid: b\n').message).toContain('line 3');
  });

  it('rejects language, custom and non-JSON tags', () => {
    for (const t of [
      'a: !!js/function "function(){}"',
      'a: !custom x',
      'a: !!binary aGk=',
      'a: !!set {x}',
      'a: !!timestamp 2001-01-01',
    ]) {
      expect(yamlError(t).message).toMatch(/tag|Unresolved/);
    }
  });

  it('rejects alias bombs, non-finite numbers, non-string keys and syntax errors', () => {
    const bomb = [
      'a: &a [x,x,x,x,x,x,x,x,x,x]',
      'b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]',
      'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]',
      'd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]',
    ];
    yamlError(bomb.join('\n'));
    yamlError('a: .inf');
    yamlError('? [1, 2]\n: x');
    yamlError('a: [1, 2');
    yamlError('x'.repeat(1024 * 1024 + 1));
  });

  it('does not interpret merge keys', () => {
    expect(parseDagYaml('<<: {a: 1}')).toEqual({ '<<': { a: 1 } });
  });
});
