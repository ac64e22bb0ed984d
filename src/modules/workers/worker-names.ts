/** A pool name: lowercase letters, digits, "-" and "_", up to 63. */
export const POOL_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;
/** A task type: letters, digits, ".", "_", ":" or "-", up to 100. */
export const TASK_TYPE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/;
/** A worker's name: printable ASCII without spaces, up to 200. */
export const WORKER_NAME = /^[\x21-\x7e]{1,200}$/;

export const DISPATCH_STRATEGIES = ['default', 'round_robin', 'least_connections', 'cheapest', 'best_value'] as const;
export type DispatchStrategy = (typeof DISPATCH_STRATEGIES)[number];

/** The classes of a task's error (see PluginError). */
export const ERROR_CLASSES = ['transient', 'permanent', 'invalid_input'] as const;

/** The pool a queue step or a worker token names when it names none. */
export const DEFAULT_POOL = 'default';

/** A size: a number and a unit (B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB), optionally after ">=". */
export const SIZE = /^(>=\s*)?(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)$/;

const UNIT: Record<string, number> = {
  B: 1,
  KiB: 1024,
  MiB: 1024 ** 2,
  GiB: 1024 ** 3,
  TiB: 1024 ** 4,
  KB: 1e3,
  MB: 1e6,
  GB: 1e9,
  TB: 1e12,
};

/** The bytes a size (`16GiB`, `>=512MiB`) stands for; a requirement's `>=` is its only comparison. */
export function parseSize(s: string): number {
  const m = SIZE.exec(s.trim());
  if (!m) throw new Error(`not a size: ${s}`);
  return Math.round(Number(m[2]) * UNIT[m[3]]);
}

/**
 * False for a size (a SIZE) over 8 PiB, Number.MAX_SAFE_INTEGER bytes: what a JSON number and
 * PostgreSQL's bigint both hold exactly (true for anything else, which the SIZE check judges). A
 * worker's resources and a step's requirements are bounded by it (SIZE_BOUND_MESSAGE).
 */
export function sizeWithinBound(s: string): boolean {
  return !SIZE.test(s.trim()) || parseSize(s) <= Number.MAX_SAFE_INTEGER;
}
export const SIZE_BOUND_MESSAGE = 'a size of at most 8PiB';

/** The plugin of steps that run on external workers (plugins/queue). */
export const QUEUE_STEP_PLUGIN = 'queue';
