import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { z } from 'zod';

/**
 * How every fuzzer runs a property: the regression corpus first (test/support/fuzz/regressions.json:
 * recorded seeds, then recorded inputs as the run's first cases), then its random cases. A run
 * takes ORDO_FUZZ_SEED and ORDO_FUZZ_PATH (fast-check's `seed` and `path`) from the environment,
 * and a failure names the seed, the path, the command that replays it and the entry that records it.
 */
export type Fuzzer = 'operations' | 'raw-bodies' | 'dag-documents';

const entrySchema = z.strictObject({
  fuzzer: z.enum(['operations', 'raw-bodies', 'dag-documents']),
  test: z.string().min(1).optional(),
  seed: z.number().int().optional(),
  path: z
    .string()
    .regex(/^\d+(:\d+)*$/)
    .optional(),
  input: z.unknown().optional(),
  note: z.string().min(1),
});
export type RegressionEntry = z.infer<typeof entrySchema>;

export const REGRESSIONS_FILE = path.join(__dirname, 'regressions.json');

let corpus: RegressionEntry[] | undefined;

/** The corpus entries of a fuzzer (and of one of its tests, for fuzzers whose tests are operations). */
export function regressions(fuzzer: Fuzzer, test?: string): RegressionEntry[] {
  corpus ??= z
    .strictObject({ $comment: z.array(z.string()), entries: z.array(entrySchema) })
    .parse(JSON.parse(fs.readFileSync(REGRESSIONS_FILE, 'utf8'))).entries;
  return corpus.filter((e) => e.fuzzer === fuzzer && (e.test === undefined || e.test === test));
}

/** ORDO_FUZZ_SEED and ORDO_FUZZ_PATH, when set. */
export function replayFromEnv(): { seed?: number; path?: string } {
  const seed = Number(process.env.ORDO_FUZZ_SEED);
  const p = process.env.ORDO_FUZZ_PATH;
  return {
    ...(process.env.ORDO_FUZZ_SEED && Number.isInteger(seed) ? { seed } : {}),
    ...(p ? { path: p } : {}),
  };
}

/** `{{fixture.<name>}}` in the strings of a recorded input, replaced by the fixture's value. */
export function withFixtures<T>(input: T, values: Record<string, string>): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') {
      return v.replace(/\{\{fixture\.(\w+)\}\}/g, (m, name: string) =>
        Object.hasOwn(values, name) ? values[name] : m,
      );
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(input) as T;
}

/** The inverse of withFixtures: fixture values (of 6 characters or more) in strings become `{{fixture.<name>}}`. */
export function namingFixtures(input: unknown, values: Record<string, string>): unknown {
  const named = Object.entries(values)
    .filter(([, v]) => v.length >= 6)
    .sort(([, a], [, b]) => b.length - a.length);
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return named.reduce((t, [name, value]) => t.split(value).join(`{{fixture.${name}}}`), v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(input);
}

export interface FuzzRun<T> {
  fuzzer: Fuzzer;
  /** The operation, for fuzzers whose corpus entries belong to one. */
  test?: string;
  arbitrary: fc.Arbitrary<T>;
  /** Throws when a case fails. */
  check: (value: T) => void | Promise<void>;
  /** Random cases (the corpus and `examples` come on top). */
  runs: number;
  /** Cases run first, after the corpus inputs. */
  examples?: T[];
  /** Turns a corpus input into a case (fills fixtures, checks its shape). */
  fromCorpus: (input: unknown) => T;
  /** Turns a failing case into a corpus input (names fixtures), or undefined to record its seed and path. */
  toCorpus?: (value: T) => unknown;
  /** Shrinks a failing case (for fast properties; HTTP runs stop at the first failure). */
  shrink?: boolean;
}

/** Runs a fuzzer's property: corpus seeds, then corpus inputs, `examples` and random cases. */
export async function runFuzz<T>(run: FuzzRun<T>): Promise<void> {
  const entries = regressions(run.fuzzer, run.test);
  const property = fc.asyncProperty(run.arbitrary, async (v) => {
    await run.check(v);
  });
  const env = replayFromEnv();
  if (env.seed === undefined) {
    for (const e of entries) {
      if (e.seed === undefined) continue;
      const result = await fc.check(property, { seed: e.seed, path: e.path, numRuns: run.runs, endOnFailure: true });
      if (result.failed) throw new Error(report(run, result, [], `corpus entry "${e.note}"`));
    }
  }
  const examples = [
    ...entries.filter((e) => e.input !== undefined).map((e) => run.fromCorpus(e.input)),
    ...(run.examples ?? []),
  ];
  const result = await fc.check(property, {
    ...env,
    examples: examples.map((v) => [v] as [T]),
    // fast-check counts examples among numRuns; the random cases stay `runs`.
    numRuns: run.runs + examples.length,
    endOnFailure: !run.shrink,
  });
  if (result.failed) throw new Error(report(run, result, examples));
}

function report<T>(run: FuzzRun<T>, result: fc.RunDetails<[T]>, examples: T[], what?: string): string {
  const state = expect.getState();
  const file = path.relative(process.cwd(), state.testPath ?? '<test file>');
  const cause = result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance);
  const index = Number(result.counterexamplePath?.split(':')[0] ?? -1);
  const source = what ?? (index < examples.length ? 'a corpus input or example' : 'a random case');
  const failing = result.counterexample?.[0];
  const input = failing === undefined ? undefined : run.toCorpus ? run.toCorpus(failing) : failing;
  const json = input === undefined ? undefined : JSON.stringify(input);
  const entry = JSON.stringify({
    fuzzer: run.fuzzer,
    ...(run.test !== undefined ? { test: run.test } : {}),
    ...(json !== undefined && json.length <= 4000 ? { input } : { seed: result.seed, path: result.counterexamplePath }),
    note: '<what failed, and why>',
  });
  return [
    `${run.fuzzer}${run.test ? ` ${run.test}` : ''}: ${source} failed after ${result.numRuns} cases ` +
      `(seed ${result.seed}, path ${result.counterexamplePath ?? '-'})`,
    cause,
    `replay: ORDO_FUZZ_SEED=${result.seed} ORDO_FUZZ_PATH=${result.counterexamplePath ?? ''} npx jest ${file} -t ${shellQuoted(regexQuoted(state.currentTestName ?? ''))}`,
    `record: ${entry}`,
  ].join('\n');
}

const regexQuoted = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const shellQuoted = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
