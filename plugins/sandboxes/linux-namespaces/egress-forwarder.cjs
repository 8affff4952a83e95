'use strict';
/**
 * Runs inside a sandbox that has a network allow-list, in its network namespace (which has only
 * loopback): listens on 127.0.0.1:<port>, the address HTTP_PROXY/HTTPS_PROXY name, and pipes every
 * connection to the egress proxy's unix socket, which decides what may pass. Once it listens it
 * starts the server with the same stdio, so no request of the server can come before the listener,
 * and exits with the server's status. It is plain CommonJS with no dependencies because it runs on
 * the system's node, inside the sandbox, before anything else.
 *
 * argv: <port> <socket path> <command> [args...]
 */
const net = require('node:net');
const os = require('node:os');
const { spawn } = require('node:child_process');

const [port, socketPath, command, ...args] = process.argv.slice(2);

const server = net.createServer((client) => {
  const upstream = net.connect(socketPath);
  const close = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', close).on('close', close);
  upstream.on('error', close).on('close', close);
  client.pipe(upstream);
  upstream.pipe(client);
});

server.on('error', (error) => {
  process.stderr.write(`sigil-sandbox: setup failed: egress forwarder: ${error.message}\n`);
  process.exit(125);
});

server.listen(Number(port), '127.0.0.1', () => {
  const child = spawn(command, args, { stdio: 'inherit' });
  child.on('error', (error) => {
    process.stderr.write(`sigil-sandbox: cannot start ${command}: ${error.message}\n`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => process.exit(code ?? 128 + (os.constants.signals[signal] ?? 0)));
});
