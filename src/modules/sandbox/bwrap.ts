import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * The filesystem and namespaces a sandboxed process gets from bubblewrap (`bwrap`).
 *
 * Every sandboxed process runs in new user, mount, PID, IPC, UTS, cgroup and network namespaces,
 * as uid/gid 65534 inside (`nobody`), with no capabilities (bwrap started by an unprivileged user
 * keeps none, and none is added), `no_new_privs`, no further user namespaces (`--disable-userns`),
 * a new session (no terminal to inject into), and dies with its parent. Its root is an empty,
 * read-only tmpfs holding only:
 *
 * - `/usr` read-only, and `/bin`, `/sbin`, `/lib*` as the host has them (links into /usr, or
 *   read-only binds where /usr is not merged);
 * - an `/etc` of Ordo's making, with copies of only what programs need to start, link and speak
 *   TLS (the loader cache, the alternatives links, CA certificates, time zone, protocol and service
 *   names), plus its own `passwd`, `group` and `hosts`: no `shadow`, no host users, no resolver;
 * - a fresh `/proc` of its own PID namespace, a minimal read-only `/dev` (null, zero, random,
 *   tty…) with a 16 MiB `/dev/shm`, and size-bounded tmpfs mounts for `/tmp` and the working directory;
 * - the binds its caller adds (the egress socket, the script host's files).
 *
 * Nothing of Ordo's (ORDO_HOME, the project directory, keys, credentials, PostgreSQL data or
 * sockets) and no other step's directory is in that view.
 */

export const SANDBOX_UID = 65534;

/** What one sandbox sees besides the system view. */
export interface SandboxView {
  /** Host paths bound read-only: [host path, path inside]. */
  readOnly?: readonly (readonly [string, string])[];
  /** Host paths bound read-write (sockets): [host path, path inside]. */
  readWrite?: readonly (readonly [string, string])[];
  /** Writable tmpfs mounts inside: [path, size in bytes, mode]. */
  tmpfs?: readonly (readonly [string, number, number])[];
  /** Working directory inside (one of the tmpfs mounts). */
  cwd?: string;
}

/** Entries of /etc a program may need; each is copied into the sandboxes' /etc when the host has it. */
const ETC = [
  'alternatives',
  'ca-certificates',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'localtime',
  'mime.types',
  'nsswitch.conf',
  'os-release',
  'pki/ca-trust',
  'pki/tls/certs',
  'protocols',
  'services',
  'ssl/certs',
  'ssl/openssl.cnf',
  'timezone',
];

/** The top-level directories of a Linux root a program may load code from. */
const SYSTEM_DIRS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

let systemView: string[] | undefined;

/** The bwrap arguments for the read-only system part of the view (computed once). */
function systemArgs(etcDir: string): string[] {
  if (!systemView) {
    const args = ['--ro-bind', '/usr', '/usr'];
    for (const d of SYSTEM_DIRS) {
      const p = `/${d}`;
      let st: fs.Stats;
      try {
        st = fs.lstatSync(p);
      } catch {
        continue;
      }
      if (st.isSymbolicLink()) args.push('--symlink', fs.readlinkSync(p), p);
      else if (st.isDirectory()) args.push('--ro-bind', p, p);
    }
    systemView = args;
  }
  return [...systemView, '--ro-bind', etcDir, '/etc'];
}

/**
 * Writes the sandboxes' /etc under `etcDir`: copies of the host's entries listed in ETC (links
 * kept as links: they point into /usr, which the view shows) and a passwd, group and hosts of its
 * own. World-readable, no secrets; written once per process, so one bind shows all of it.
 */
export function writeSandboxEtc(etcDir: string): void {
  fs.mkdirSync(etcDir, { recursive: true, mode: 0o755 });
  for (const entry of ETC) {
    const src = path.join('/etc', entry);
    if (!fs.existsSync(src)) continue;
    fs.mkdirSync(path.dirname(path.join(etcDir, entry)), { recursive: true, mode: 0o755 });
    fs.cpSync(src, path.join(etcDir, entry), { recursive: true, verbatimSymlinks: true, errorOnExist: false });
  }
  const files: [string, string][] = [
    [
      'passwd',
      `root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nnobody:x:${SANDBOX_UID}:${SANDBOX_UID}:sandbox:/work:/usr/sbin/nologin\n`,
    ],
    ['group', `root:x:0:\nnogroup:x:${SANDBOX_UID}:\n`],
    ['hosts', '127.0.0.1\tlocalhost\n::1\tlocalhost\n'],
  ];
  for (const [name, text] of files) fs.writeFileSync(path.join(etcDir, name), text, { mode: 0o644 });
}

/** The full bwrap argument list (without the command) for one sandbox. */
export function bwrapArgs(etcDir: string, view: SandboxView): string[] {
  const args = [
    '--unshare-all',
    '--unshare-user',
    '--disable-userns',
    '--die-with-parent',
    '--new-session',
    '--uid',
    String(SANDBOX_UID),
    '--gid',
    String(SANDBOX_UID),
    '--hostname',
    'sandbox',
    ...systemArgs(etcDir),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    // /dev itself is a tmpfs bwrap fills with device nodes: read-only after, with a bounded /dev/shm.
    '--perms',
    '1777',
    '--size',
    String(16 * 1024 * 1024),
    '--tmpfs',
    '/dev/shm',
    '--remount-ro',
    '/dev',
  ];
  for (const [dest, bytes, mode] of view.tmpfs ?? [])
    args.push('--perms', mode.toString(8).padStart(4, '0'), '--size', String(bytes), '--tmpfs', dest);
  for (const [src, dest] of view.readOnly ?? []) args.push('--ro-bind', src, dest);
  for (const [src, dest] of view.readWrite ?? []) args.push('--bind', src, dest);
  if (view.cwd) args.push('--chdir', view.cwd);
  // Last: the root tmpfs itself becomes read-only; the mounts above keep their own modes.
  args.push('--remount-ro', '/');
  return args;
}

export type BwrapSupport = { ok: true } | { ok: false; reason: string };

const probes = new Map<string, BwrapSupport>();

/**
 * Whether bwrap can build a sandbox here as `uid`/`gid` (probed once per binary and uid): it must
 * exist and the kernel must let that user create user namespaces.
 */
export function probeBwrap(bwrap: string, etcDir: string, ids: { uid?: number; gid?: number }): BwrapSupport {
  const key = `${bwrap}\0${ids.uid ?? ''}`;
  const known = probes.get(key);
  if (known) return known;
  let result: BwrapSupport;
  if (!fs.existsSync(bwrap)) {
    result = {
      ok: false,
      reason: `bubblewrap is not installed (${bwrap} is missing; Debian: apt-get install bubblewrap)`,
    };
  } else {
    const r = spawnSync(bwrap, [...bwrapArgs(etcDir, { tmpfs: [['/tmp', 1 << 20, 0o1777]] }), '--', '/bin/true'], {
      ...ids,
      env: {},
      timeout: 10_000,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    result =
      r.status === 0
        ? { ok: true }
        : {
            ok: false,
            reason: `bubblewrap cannot build a sandbox here (user namespaces disabled?): ${
              r.error ? r.error.message : String(r.stderr).trim() || `exit ${r.status}`
            }`,
          };
  }
  probes.set(key, result);
  return result;
}
