import { evaluateCondition, type ConditionScope } from '../src/modules/flow/condition';

/** What a step's condition costs the worker: µs per evaluation (its compiled form is kept). */
export function conditionCost(iterations = 50_000): { expression: string; meanUs: number; p99Us: number }[] {
  const scope = (i: number): ConditionScope => ({
    inputs: { region: i % 2 === 0 ? 'eu' : 'us', limit: 10 },
    steps: {
      list: { outputs: { items: [1, 2, 3], count: i % 7 }, status: 'succeeded', namedStatus: null },
      check: { outputs: { ok: i % 3 !== 0 }, status: i % 5 === 0 ? 'failed' : 'succeeded', namedStatus: null },
    },
  });
  const expressions = [
    'steps.check.outputs.ok',
    'steps.list.outputs.count < inputs.limit && inputs.region == "eu" && steps.check.status == "succeeded"',
    'steps.list.outputs.items.exists(x, x > 2) && size(steps.list.outputs.items) > 0',
  ];
  return expressions.map((expression) => {
    for (let i = 0; i < 2_000; i++) evaluateCondition(expression, scope(i));
    const times: number[] = [];
    for (let i = 0; i < iterations; i++) {
      const s = scope(i);
      const t0 = process.hrtime.bigint();
      evaluateCondition(expression, s);
      times.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    times.sort((a, b) => a - b);
    const mean = times.reduce((a, b) => a + b, 0) / times.length;
    return { expression, meanUs: +mean.toFixed(2), p99Us: +times[Math.floor(times.length * 0.99)].toFixed(2) };
  });
}
