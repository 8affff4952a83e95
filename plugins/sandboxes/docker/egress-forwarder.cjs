'use strict';
/**
 * The forwarder container of an allow-listed sandbox (egress.ts): it runs in the network namespace
 * the server's container joins (nothing but loopback), listens on 127.0.0.1:<port>, the address
 * HTTP_PROXY/HTTPS_PROXY name, and pipes every connection to the gateway's egress proxy through the
 * unix socket bound into this container alone, which decides what may pass. Plain CommonJS with no
 * dependencies: it runs on the image's node.
 *
 * argv: <port> <socket path>
 */
const net = require('node:net');

const [port, socketPath] = process.argv.slice(2);

const server = net.createServer((client) => {
  const upstream = net.connect(socketPath);
  // An end travels through the pipes after what was sent before it (the proxy's 403, say); a
  // broken side takes the other down at once.
  const broken = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', broken);
  upstream.on('error', broken);
  client.pipe(upstream);
  upstream.pipe(client);
});

server.on('error', (error) => {
  process.stderr.write(`sigil-egress: ${error.message}\n`);
  process.exit(1);
});

// Ready once listening: the runtime waits for this line before it starts the server's container.
server.listen(Number(port), '127.0.0.1', () => process.stdout.write('listening\n'));
