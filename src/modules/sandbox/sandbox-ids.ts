/** Uids (and equal gids) a process hands to the sandboxes it starts, at most this many at once each. */
export const UIDS_PER_PROCESS = 32;
/** The largest process id Linux can give (pid_max is at most 2^22). */
const PID_LIMIT = 1 << 22;

export interface SandboxId {
  /** The host uid and gid the sandboxed process runs as; undefined: this process's own. */
  uid?: number;
  gid?: number;
  release(): void;
}

/**
 * Host identities for sandboxed processes.
 *
 * Run as root, Ordo starts each sandbox as an unprivileged host uid of its own, so a process that
 * escaped its namespaces would still own no file and could signal no process of Ordo's, of the
 * system's or of another sandbox: uid = base + pid × 32 + slot. Live processes have distinct pids,
 * so two Ordo processes on one host never hand out the same uid; within a process each running
 * sandbox takes the slot with the fewest holders, so uids are shared only past 32 sandboxes at once
 * (each still in namespaces of its own). Run as another user, Ordo cannot switch uids: its sandboxes run
 * as its own uid (mapped to 65534 inside), and their isolation is the namespaces and the view alone.
 */
export class SandboxIds {
  /** Sandboxes holding each slot's uid right now. */
  private readonly holders = new Array<number>(UIDS_PER_PROCESS).fill(0);
  private readonly base: number | undefined;

  constructor(uidBase: number, euid: number | undefined = process.geteuid?.(), pid = process.pid) {
    if (euid === 0) this.base = uidBase + (pid % PID_LIMIT) * UIDS_PER_PROCESS;
  }

  /** Whether sandboxes run as uids of their own (this process is root). */
  get separate(): boolean {
    return this.base !== undefined;
  }

  /** A uid for one sandbox; release it when the sandbox has exited. */
  acquire(): SandboxId {
    const base = this.base;
    if (base === undefined) return { release: () => undefined };
    let slot = 0;
    for (let i = 1; i < UIDS_PER_PROCESS && this.holders[slot] > 0; i++)
      if (this.holders[i] < this.holders[slot]) slot = i;
    this.holders[slot]++;
    let released = false;
    return {
      uid: base + slot,
      gid: base + slot,
      release: () => {
        if (released) return;
        released = true;
        this.holders[slot]--;
      },
    };
  }
}
