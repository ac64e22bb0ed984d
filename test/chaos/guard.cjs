// The chaos harness's guard. The harness starts it detached (its own session: a Ctrl-C in the
// terminal does not reach it) and tells it, one JSON object a line on its stdin, what it started:
//   {"group": pid}          an Ordo process or an external worker (the leader of its own process group)
//   {"group": pid, "marker": s}  another process group of the harness's (Patroni, etcd, HAProxy) whose
//                           leader's command line contains s (its temporary directory)
//   {"exited": pid}         that process has exited: forget it
//   {"pg": dataDir, "stop": [cmd, ...args]}  the harness's PostgreSQL and the command that stops it
//   {"rm": dir}             a temporary directory
// When its stdin closes — the harness ended in any way: finished, failed, Ctrl-C, killed — it
// SIGKILLs the process groups still running, stops PostgreSQL (immediate) and removes the
// directories. Plain Node, no dependencies: it must work whatever state the harness died in.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const groups = new Map();
const pgs = new Map();
const dirs = new Set();
let buf = '';

for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(s, () => undefined);

function handle(line) {
  if (!line.trim()) return;
  let m;
  try {
    m = JSON.parse(line);
  } catch {
    return;
  }
  if (typeof m.group === 'number') groups.set(m.group, typeof m.marker === 'string' ? m.marker : null);
  if (typeof m.exited === 'number') groups.delete(m.exited);
  if (typeof m.pg === 'string' && Array.isArray(m.stop)) pgs.set(m.pg, m.stop);
  if (typeof m.rm === 'string') dirs.add(m.rm);
}

/**
 * Still a process of ours (not a recycled pid): its command line runs Ordo or the harness's external
 * worker, or contains the marker it was registered with.
 */
function ours(pid, marker) {
  try {
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    if (marker) return cmd.includes(marker);
    return cmd.includes('dist/src/main.js') || cmd.includes('dist/test/chaos/external-worker.js');
  } catch {
    return false;
  }
}

function cleanup() {
  for (const [pid, marker] of groups) {
    if (!ours(pid, marker)) continue;
    try {
      process.kill(-pid, 'SIGCONT');
      process.kill(-pid, 'SIGKILL');
    } catch {
      // Gone meanwhile.
    }
  }
  for (const [dataDir, stop] of pgs) {
    if (!fs.existsSync(path.join(dataDir, 'postmaster.pid'))) continue;
    try {
      execFileSync(stop[0], stop.slice(1), { stdio: 'ignore', timeout: 30_000 });
    } catch {
      // Already stopped.
    }
  }
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  process.exit(0);
}

process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    handle(buf.slice(0, i));
    buf = buf.slice(i + 1);
  }
});
process.stdin.on('end', cleanup);
process.stdin.on('error', cleanup);
