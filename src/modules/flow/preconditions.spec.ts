import { checkCondition, checkPrecondition, ConditionError } from './condition';
import { checkPreconditions, conditionScope } from './preconditions';

const pre = (expressions: string[]) => ({
  expressions,
  onViolation: 'wait' as const,
  maxWait: 60_000,
  checkEvery: 5_000,
});
const now = new Date('2026-03-01T08:30:00.000Z');

describe('preconditions', () => {
  it('hold when every expression is true, reading inputs, upstream outputs and now', () => {
    const scope = conditionScope({ at: '2026-03-01T08:00:00Z' }, { load: { outputs: { rows: 3 } } });
    const v = checkPreconditions(
      pre(['now >= timestamp(inputs.at)', 'steps.load.outputs.rows > 0', 'now.getHours("UTC") == 8']),
      scope,
      now,
    );
    expect(v).toEqual({ outcome: 'held', data: { holds: true, now: '2026-03-01T08:30:00.000Z' } });
  });

  it('name the first expression that is false, checked in order', () => {
    const v = checkPreconditions(pre(['true', 'inputs.n > 1', 'inputs.missing']), conditionScope({ n: 1 }, {}), now);
    expect(v).toMatchObject({
      outcome: 'false',
      expression: 'inputs.n > 1',
      data: { holds: false, index: 1, expression: 'inputs.n > 1', now: '2026-03-01T08:30:00.000Z' },
    });
  });

  it('report an expression that cannot be evaluated as an error', () => {
    const v = checkPreconditions(pre(['inputs.missing.field == 1']), conditionScope({}, {}), now);
    expect(v.outcome).toBe('error');
    expect(v.data).toMatchObject({ holds: false, index: 0 });
  });

  it('are checked at publish: now is known to a precondition, not to a condition', () => {
    expect(checkPrecondition('now > timestamp("2026-01-01T00:00:00Z") && steps.a.status == "succeeded"')).toEqual({
      steps: ['a'],
    });
    expect(() => checkCondition('now > timestamp("2026-01-01T00:00:00Z")')).toThrow(ConditionError);
    expect(() => checkPrecondition('now')).toThrow(ConditionError);
    expect(() => checkPrecondition('now +')).toThrow(ConditionError);
  });
});
