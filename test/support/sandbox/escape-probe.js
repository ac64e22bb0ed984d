'use strict';
// Stands in for script-host.js in tests, as a script that escaped its isolate would: it runs in the
// script sandbox process itself and reports what that process can read, write, reach and see.
// A job's `code` is JSON: { read: [path], write: [path], connect: [[host, port]] }.

const fs = require('node:fs');
const net = require('node:net');

function attempt(fn) {
  try {
    fn();
    return 'ok';
  } catch (e) {
    return e.code || e.message;
  }
}

function connect(host, port) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port, timeout: 2000 });
    s.once('connect', () => {
      s.destroy();
      resolve('ok');
    });
    s.once('timeout', () => {
      s.destroy();
      resolve('ETIMEDOUT');
    });
    s.once('error', (e) => resolve(e.code || e.message));
  });
}

async function probe(spec) {
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  const field = (name) => (new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(status) || [])[1];
  return {
    uid: process.getuid(),
    gid: process.getgid(),
    noNewPrivs: field('NoNewPrivs'),
    capEff: field('CapEff'),
    pids: fs.readdirSync('/proc').filter((e) => /^\d+$/.test(e)).length,
    env: Object.keys(process.env).sort(),
    read: Object.fromEntries((spec.read || []).map((p) => [p, attempt(() => fs.readFileSync(p))])),
    write: Object.fromEntries((spec.write || []).map((p) => [p, attempt(() => fs.writeFileSync(p, 'x'))])),
    connect: Object.fromEntries(
      await Promise.all((spec.connect || []).map(async ([h, p]) => [`${h}:${p}`, await connect(h, p)])),
    ),
  };
}

process.on('message', (msg) => {
  if (!msg || msg.type !== 'run') return;
  probe(JSON.parse(msg.code)).then(
    (r) => process.send({ type: 'result', id: msg.id, ok: true, json: JSON.stringify(r), logs: [], dropped: 0 }),
    (e) => process.send({ type: 'result', id: msg.id, ok: false, code: 'SCRIPT_ERROR', message: String(e), logs: [] }),
  );
});
process.on('disconnect', () => process.exit(0));
process.send({ type: 'ready' });
