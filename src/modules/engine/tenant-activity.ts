/**
 * Whether tenants share the engine right now: a worker has seen work of two or more tenants (a
 * wake-up, which every worker receives for every tenant, or a step it started) within `windowMs`
 * (ORDO_TENANT_SHARED_WINDOW_MS). The window is long, 30 s by default, so that the cap is already
 * down when a tenant whose steps come every few seconds sends its next one: the steps a busy
 * tenant has in flight when the cap goes down take their time to end.
 * While they do, each tenant's steps in flight are held to the shared cap
 * (ORDO_TENANT_SHARED_IN_FLIGHT), so that a tenant with a deep backlog leaves the database room to
 * serve another tenant's next step at once; a tenant alone gets the full cap.
 *
 * Two entries are enough, whatever the number of tenants: the tenant seen last, and the most recent
 * sighting of any other. Two tenants were seen within the window exactly when that other one was.
 */
export class TenantActivity {
  private last: { tenant: string; at: number } | null = null;
  private other: { tenant: string; at: number } | null = null;

  constructor(private readonly windowMs: number) {}

  seen(tenant: string, at: number): void {
    if (this.last === null) this.last = { tenant, at };
    else if (this.last.tenant === tenant) this.last.at = Math.max(this.last.at, at);
    else {
      this.other = this.last;
      this.last = { tenant, at };
    }
  }

  /** Two or more tenants were seen within the window before `at`. */
  shared(at: number): boolean {
    return this.other !== null && at - this.other.at < this.windowMs;
  }
}
