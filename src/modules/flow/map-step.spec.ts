import { dagDefinition } from '../dags/dag-definition';
import { renderTemplate, TemplateError } from '../templating/template';
import { isMapInstance, mapIssues, mapItems, mapSource, type MapError } from './map-step';

const step = (extra: Record<string, unknown>) =>
  dagDefinition.parse({
    id: 'd',
    steps: [
      { id: 'list', plugin: 'noop' },
      { id: 'other', plugin: 'noop' },
      { id: 'm', plugin: 'noop', dependsOn: ['list'], ...extra },
    ],
  }).steps[2];

describe('mapSource', () => {
  it('reads inputs or step outputs from one whole template', () => {
    expect(mapSource('${{ steps.list.outputs.items }}')).toEqual({ kind: 'steps', path: ['list', 'outputs', 'items'] });
    expect(mapSource('${{ inputs.xs }}')).toEqual({ kind: 'inputs', path: ['xs'] });
  });

  it('refuses text around the template, secrets and literals', () => {
    for (const m of ['items: ${{ inputs.xs }}', '${{ secrets.K }}', 'xs', '${{ map.item }}'])
      expect(() => mapSource(m)).toThrow(TemplateError);
  });
});

describe('mapIssues', () => {
  it('accepts a map over a dependency or the inputs', () => {
    expect(mapIssues(step({ map: '${{ steps.list.outputs.items }}', maxParallel: 3 }), 'steps.2')).toEqual([]);
    expect(
      mapIssues(step({ map: '${{ inputs.xs }}', with: { output: { x: '${{ map.item.x }}' } } }), 'steps.2'),
    ).toEqual([]);
  });

  it('names the step and what is wrong', () => {
    const issues = (extra: Record<string, unknown>) =>
      mapIssues(step(extra), 'steps.2').map((i) => [i.path, i.message]);
    expect(issues({ map: '${{ steps.other.outputs.items }}' })).toEqual([
      ['steps.2.map', 'map reads step "other", which is not a dependency of "m" (add it to dependsOn)'],
    ]);
    expect(issues({ maxParallel: 2 })).toEqual([['steps.2.maxParallel', 'maxParallel applies to map steps only']]);
    expect(issues({ with: { output: { i: '${{ map.index }}' } } })).toEqual([
      ['steps.2.with', 'map.item and map.index exist only in a map step'],
    ]);
    expect(issues({ map: '${{ inputs.xs }}', concurrency: 2 })[0][0]).toBe('steps.2.concurrency');
  });
});

describe('mapItems', () => {
  const scope = { inputs: { xs: [1, 2], n: 3 }, steps: { list: { outputs: { items: ['a'] } } } };

  it('gives the array the template reads', () => {
    expect(mapItems('${{ inputs.xs }}', scope)).toEqual([1, 2]);
    expect(mapItems('${{ steps.list.outputs.items }}', scope)).toEqual(['a']);
  });

  it('fails what is not an array, too long, or does not resolve, with its code', () => {
    const code = (m: string, s = scope) => {
      try {
        mapItems(m, s);
      } catch (e) {
        return (e as MapError).code;
      }
      return 'none';
    };
    expect(code('${{ inputs.n }}')).toBe('MAP_NOT_ARRAY');
    expect(code('${{ inputs.missing }}')).toBe('TEMPLATE_UNRESOLVED');
    expect(code('${{ inputs.xs }}', { ...scope, inputs: { xs: new Array(10_001).fill(0) as number[], n: 0 } })).toBe(
      'MAP_TOO_LARGE',
    );
    expect(
      mapItems('${{ inputs.xs }}', { ...scope, inputs: { xs: new Array(10_000).fill(0) as number[], n: 0 } }),
    ).toHaveLength(10_000);
  });
});

describe('map templates', () => {
  it('render the element and index of a map instance, and do not resolve elsewhere', () => {
    const scope = { inputs: {}, steps: {}, map: { item: { url: 'u' }, index: 4 } };
    expect(
      renderTemplate({ u: '${{ map.item.url }}', i: '${{ map.index }}', t: 'n${{ map.index }}' }, scope).value,
    ).toEqual({ u: 'u', i: 4, t: 'n4' });
    expect(() => renderTemplate('${{ map.item }}', { inputs: {}, steps: {} })).toThrow(TemplateError);
    expect(() => renderTemplate('${{ map.other }}', scope)).toThrow(TemplateError);
  });

  it('tells map instances by their id', () => {
    expect(isMapInstance('resize[17]')).toBe(true);
    expect(isMapInstance('resize')).toBe(false);
  });
});
