'use strict';
// Runs inside a `cli` step's sandbox, whose network namespace has nothing but its own loopback:
// listens on 127.0.0.1:<port> there and carries each connection to the egress proxy's Unix socket
// (bound into the sandbox; the proxy outside decides what may be reached), then runs the step's
// command and exits as it does (128 + the signal's number when a signal ended it). Plain CommonJS
// so it runs unchanged from src/ (tests) and from dist/.
//
// argv: <socket path> <port> <command> [args...]

const net = require('node:net');
const os = require('node:os');
const { spawn } = require('node:child_process');

const [socketPath, portText, command, ...args] = process.argv.slice(2);

const server = net.createServer((client) => {
  const upstream = net.connect(socketPath);
  const close = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', close);
  upstream.on('error', close);
  client.on('close', close);
  upstream.on('close', close);
  client.pipe(upstream);
  upstream.pipe(client);
});

server.on('error', (e) => {
  process.stderr.write(`sandbox egress forwarder: ${e.message}\n`);
  process.exit(126);
});

server.listen(Number(portText), '127.0.0.1', () => {
  const child = spawn(command, args, { stdio: 'inherit' });
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('error', (e) => {
    process.stderr.write(`${command}: ${e.message}\n`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => {
    process.exit(signal ? 128 + (os.constants.signals[signal] ?? 0) : (code ?? 1));
  });
});
