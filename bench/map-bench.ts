import type { DagDefinitionInput } from '../src/modules/dags/dag-definition';

/** The map scenario's DAG: one step lists `width` elements, a map step runs once per element, one step joins. */
export function fanOutDag(id: string): DagDefinitionInput {
  return {
    id,
    steps: [
      { id: 'list', plugin: 'noop', with: { output: { items: '${{ inputs.items }}' } } },
      {
        id: 'each',
        plugin: 'noop',
        dependsOn: ['list'],
        map: '${{ steps.list.outputs.items }}',
        with: { output: { i: '${{ map.index }}' } },
      },
      { id: 'join', plugin: 'noop', dependsOn: ['each'], with: { output: { n: '${{ steps.each.outputs.results }}' } } },
    ],
  };
}

/** A map run's figures: from its creation to its end (the run-ending commit), and steps per second over that time. */
export interface MapRow {
  repeat: number;
  width: number;
  /** Steps that ran: the list, the map step, its instances and the join. */
  steps: number;
  makespanMs: number;
  stepsPerS: number;
  succeeded: boolean;
}

export function mapRow(repeat: number, width: number, makespanMs: number, succeeded: boolean): MapRow {
  const steps = width + 3;
  return {
    repeat,
    width,
    steps,
    makespanMs: Math.round(makespanMs),
    stepsPerS: Math.round(steps / (makespanMs / 1000)),
    succeeded,
  };
}
