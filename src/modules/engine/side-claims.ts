import type { ClaimedWork, ClaimOptions, SideClaimOptions } from './engine.store';
import type { EngineProfile } from './engine-profile';

/** Claims on the side under way at once, each for the tenants its wake-ups named. */
const SIDE_CLAIMS = 2;

export interface SideClaimsOptions {
  /** A claim that never waits for another transaction (EngineStore.claimNow). */
  claim(opts: SideClaimOptions): Promise<ClaimedWork[]>;
  /** The worker's claim options with room for `capacity` steps. */
  options(capacity: number): ClaimOptions;
  /** The room for steps claimed on the side, given what the claims under way already reserved. */
  room(reserved: number): number;
  /** Tenants another turn of the worker serves right now: left to it. */
  serving(): Iterable<string>;
  /** Steps claimed on the side, for the front of the worker's local queue. */
  claimed(work: ClaimedWork[]): void;
  stopping(): boolean;
  profile: EngineProfile;
  log: { warn(obj: object, msg: string): void };
}

/**
 * Claims for tenants woken while the worker's loop is not serving them: at once, in a statement of
 * their own for the tenants woken so far, skipping whatever other transactions hold, so that
 * another tenant's step waits neither for the loop's turn nor for room in the local queue. Up to
 * SIDE_CLAIMS are under way at once, a tenant in one at a time (a wake-up meanwhile is served by the
 * next), so a slow claim for one tenant does not hold back the next tenant's step.
 */
export class SideClaims {
  private readonly pending = new Set<string>();
  /** Claims under way, by the tenants each claims for and the room each was given. */
  private readonly underway = new Map<Promise<void>, { tenants: string[]; room: number }>();

  constructor(private readonly o: SideClaimsOptions) {}

  /** Claims for `tenantId` (with the tenants already waiting) as soon as a claim can start. */
  request(tenantId?: string): void {
    if (tenantId) this.pending.add(tenantId);
    while (!this.o.stopping() && this.underway.size < SIDE_CLAIMS && this.pending.size > 0) {
      const busy = new Set([...this.underway.values()].flatMap((c) => c.tenants));
      const tenants = [...this.pending].filter((t) => !busy.has(t));
      if (tenants.length === 0) return;
      const reserved = [...this.underway.values()].reduce((n, c) => n + c.room, 0);
      const room = this.o.room(reserved);
      if (room <= 0) {
        // No room: the loop's next turn claims for them (the wake-up is kept for it).
        this.pending.clear();
        return;
      }
      for (const t of tenants) this.pending.delete(t);
      const t0 = this.o.profile.start();
      const claim: Promise<void> = this.o
        .claim({ ...this.o.options(room), onlyTenants: tenants, excludeTenants: [...this.o.serving()] })
        .then(
          (claimed) => {
            this.o.profile.add(claimed.length > 0 ? 'claimNow' : 'claimNow (nothing)', t0);
            if (claimed.length > 0) this.o.claimed(claimed);
          },
          (e: unknown) => this.o.log.warn({ err: e }, 'claim failed'),
        )
        .finally(() => {
          this.underway.delete(claim);
          this.request();
        });
      this.underway.set(claim, { tenants, room });
    }
  }

  /** Settles once every claim under way has. */
  async settled(): Promise<void> {
    await Promise.all(this.underway.keys());
  }
}
