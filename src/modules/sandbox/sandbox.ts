import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { OrdoConfig } from '../../core/config/config';
import { projectRoot } from '../../core/home/project-root';
import { closedAncestor } from '../../core/home/traversable';
import { bwrapArgs, probeBwrap, writeSandboxEtc, type BwrapSupport, type SandboxView } from './bwrap';
import { CliRunner, type CliRunOptions, type CliRunResult } from './cli-runner';
import { egressPolicy, type EgressPolicy } from './egress';
import { SandboxIds, type SandboxId } from './sandbox-ids';
import { ScriptSandboxPool, type ScriptPoolOptions } from './script-pool';

/** The operator's sandbox settings (from the environment, see config.ts). */
export interface SandboxSettings {
  /** Without a working sandbox, `cli` steps fail with SANDBOX_UNAVAILABLE (true) or run unsandboxed. */
  cliRequired: boolean;
  /** First host uid of the range sandboxes run as when Ordo runs as root. */
  uidBase: number;
  /** Special ranges a step's IP-literal egress entry may reach (ORDO_EGRESS_ALLOW_PRIVATE). */
  allowPrivate: readonly string[];
  /** Script sandbox processes per Ordo process. */
  scriptProcesses: number;
  /** The bubblewrap binary. */
  bwrap?: string;
}

export function sandboxSettings(config: OrdoConfig): SandboxSettings {
  return {
    cliRequired: config.ORDO_CLI_SANDBOX_REQUIRED,
    uidBase: config.ORDO_SANDBOX_UID_BASE,
    allowPrivate: config.ORDO_EGRESS_ALLOW_PRIVATE,
    scriptProcesses: config.ORDO_SCRIPT_SANDBOX_PROCESSES ?? Math.min(8, Math.max(2, os.availableParallelism())),
  };
}

/** The Node binary sandboxed helpers run on: this one when it is Node 24+, else the pinned one. */
export function nodeBinary(): string {
  if (Number(process.versions.node.split('.')[0]) >= 24) return process.execPath;
  return path.join(projectRoot(), 'node_modules', '.bin', 'node');
}

/** A plain-JavaScript helper beside this module (src/ under ts-jest, dist/ or src/ when built). */
export function helperFile(name: string): string {
  const here = path.join(__dirname, name);
  if (fs.existsSync(here)) return here;
  return path.join(projectRoot(), 'src', 'modules', 'sandbox', name);
}

/** How a sandboxed process is started: the file, its arguments and the host identity it runs as. */
export interface SandboxLaunch {
  file: string;
  args: string[];
  uid?: number;
  gid?: number;
}

/**
 * Everything a process needs to run tenant code out of reach of the instance: the host uids its
 * sandboxes run as, a private runtime directory (the sandboxes' passwd/group/hosts, the egress
 * sockets of running `cli` steps), the bubblewrap probe, the operator's egress policy, the `cli`
 * runner and the script sandbox pool. One per Ordo process; plugins reach it through their context.
 */
export class Sandbox {
  readonly egress: EgressPolicy;
  readonly ids: SandboxIds;
  readonly cli: CliRunner;
  private root: string | undefined;
  private pool: ScriptSandboxPool | undefined;
  private support: BwrapSupport | undefined;

  constructor(
    readonly settings: SandboxSettings,
    private readonly poolOptions: Partial<ScriptPoolOptions> = {},
  ) {
    this.egress = egressPolicy(settings.allowPrivate);
    this.ids = new SandboxIds(settings.uidBase);
    this.cli = new CliRunner(this);
  }

  get bwrap(): string {
    return this.settings.bwrap ?? '/usr/bin/bwrap';
  }

  /**
   * This process's runtime directory (created on first use, removed by close): mode 0711, so a
   * sandbox uid can reach its own entry by name and list nothing.
   */
  runtimeDir(): string {
    if (!this.root) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-sandbox-'));
      fs.chmodSync(dir, 0o711);
      writeSandboxEtc(path.join(dir, 'etc'));
      this.root = dir;
    }
    return this.root;
  }

  /** Whether bubblewrap can build sandboxes here (probed once), and why not. */
  available(): BwrapSupport {
    if (!this.support) {
      const closed = this.ids.separate
        ? [nodeBinary(), helperFile('egress-forwarder.js'), helperFile('script-host.js')]
            .map((f) => ({ f, closed: closedAncestor(f) }))
            .find((c) => c.closed)
        : undefined;
      if (closed?.closed) {
        this.support = {
          ok: false,
          reason:
            `sandboxes run as their own unprivileged users, which cannot pass through ${closed.closed.dir} ` +
            `(mode ${closed.closed.mode}) to reach ${closed.f}: allow it (chmod o+x ${closed.closed.dir}) or install Ordo elsewhere`,
        };
      } else {
        const id = this.ids.acquire();
        try {
          this.support = probeBwrap(this.bwrap, path.join(this.runtimeDir(), 'etc'), { uid: id.uid, gid: id.gid });
        } finally {
          id.release();
        }
      }
    }
    return this.support;
  }

  /** The launch of `command` in a sandbox with `view`, as `id`. */
  launch(id: SandboxId, view: SandboxView, command: readonly string[]): SandboxLaunch {
    return {
      file: this.bwrap,
      args: [...bwrapArgs(path.join(this.runtimeDir(), 'etc'), view), '--', ...command],
      uid: id.uid,
      gid: id.gid,
    };
  }

  /** Runs one `cli` command (see CliRunner). */
  runCli(o: CliRunOptions): Promise<CliRunResult> {
    return this.cli.run(o);
  }

  /** The script sandbox processes of this Ordo process (started on first use). */
  scripts(): ScriptSandboxPool {
    this.pool ??= new ScriptSandboxPool(this, { size: this.settings.scriptProcesses, ...this.poolOptions });
    return this.pool;
  }

  async close(): Promise<void> {
    await this.pool?.close();
    this.pool = undefined;
    if (this.root) await fs.promises.rm(this.root, { recursive: true, force: true }).catch(() => undefined);
    this.root = undefined;
  }
}
