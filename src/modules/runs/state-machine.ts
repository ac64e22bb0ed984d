import { DomainError } from '../../core/errors/domain-error';

export const RUN_STATES = ['scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled'] as const;
export const STEP_STATES = [
  'pending',
  'queued',
  'running',
  'waiting',
  'succeeded',
  'failed',
  'skipped',
  'cancelled',
  'retrying',
  'orphaned',
] as const;
export const ATTEMPT_STATES = ['running', 'succeeded', 'failed', 'orphaned', 'cancelled', 'skipped'] as const;

export type RunStatus = (typeof RUN_STATES)[number];
export type StepStatus = (typeof STEP_STATES)[number];
export type AttemptStatus = (typeof ATTEMPT_STATES)[number];
export type Entity = 'run' | 'step' | 'attempt';

/**
 * The allowed state transitions: the one table every status write is checked against. The
 * database holds the same table (state_transition, db/migrations/001_baseline.sql and the migrations after it) and its triggers refuse any
 * other change, whoever writes it.
 */
export const TRANSITIONS: { readonly [E in Entity]: Readonly<Record<string, readonly string[]>> } = {
  run: {
    scheduled: ['queued', 'cancelled'],
    queued: ['running', 'succeeded', 'failed', 'cancelled'],
    running: ['succeeded', 'failed', 'cancelled'],
    succeeded: [],
    failed: [],
    cancelled: [],
  },
  step: {
    pending: ['queued', 'skipped', 'cancelled'],
    queued: ['running', 'skipped', 'failed', 'cancelled'],
    running: ['succeeded', 'failed', 'retrying', 'orphaned', 'cancelled', 'skipped', 'waiting'],
    waiting: ['running', 'queued', 'cancelled'],
    retrying: ['queued', 'cancelled'],
    orphaned: ['queued', 'retrying', 'failed', 'cancelled'],
    succeeded: [],
    failed: [],
    skipped: [],
    cancelled: [],
  },
  attempt: {
    running: ['succeeded', 'failed', 'orphaned', 'cancelled', 'skipped'],
    succeeded: [],
    failed: [],
    orphaned: [],
    cancelled: [],
    skipped: [],
  },
};

export const TERMINAL_RUN_STATES: readonly RunStatus[] = ['succeeded', 'failed', 'cancelled'];
export const TERMINAL_STEP_STATES: readonly StepStatus[] = ['succeeded', 'failed', 'skipped', 'cancelled'];

export function canTransition(entity: Entity, from: string, to: string): boolean {
  return TRANSITIONS[entity][from]?.includes(to) ?? false;
}

/** Every (entity, from, to) of the table, for comparison with the database's copy. */
export function transitionRows(): { entity: Entity; from: string; to: string }[] {
  const out: { entity: Entity; from: string; to: string }[] = [];
  for (const entity of Object.keys(TRANSITIONS) as Entity[]) {
    for (const [from, tos] of Object.entries(TRANSITIONS[entity])) for (const to of tos) out.push({ entity, from, to });
  }
  return out;
}

/** Refuses an illegal transition; the caller logs the error and applies nothing. */
export function assertTransition(entity: Entity, from: string, to: string): void {
  if (!canTransition(entity, from, to)) {
    throw new DomainError('ILLEGAL_TRANSITION', `illegal ${entity} transition ${from} -> ${to}`, 409);
  }
}

/** Where an update statement allows the change: the states `to` may be reached from. */
export function sourcesOf(entity: Entity, to: string): string[] {
  return Object.entries(TRANSITIONS[entity])
    .filter(([, tos]) => tos.includes(to))
    .map(([from]) => from);
}
