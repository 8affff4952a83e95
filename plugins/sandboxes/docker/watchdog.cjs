'use strict';
/**
 * Removes the containers of one runtime instance when that runtime's process is gone. The runtime
 * starts this in a session of its own and keeps the write end of its stdin; the kernel closes it
 * when the runtime ends in any way, SIGKILL included, and then every container labelled with the
 * instance id is removed, and the instance's state directory (pipes, egress sockets). A normal stop
 * removes them first, so this finds none. Plain CommonJS: it runs on node alone, with dockerode.
 *
 * argv: <JSON { connection: { socketPath } | { host, port, tls?: { ca, cert, key } }, instanceLabel, stateDir }>
 */
const fs = require('node:fs');
const Docker = require('dockerode');

const { connection, instanceLabel, stateDir } = JSON.parse(process.argv[2]);
const docker = new Docker(
  connection.socketPath
    ? { socketPath: connection.socketPath }
    : {
        host: connection.host,
        port: connection.port,
        protocol: connection.tls ? 'https' : 'http',
        ...(connection.tls
          ? {
              ca: fs.readFileSync(connection.tls.ca),
              cert: fs.readFileSync(connection.tls.cert),
              key: fs.readFileSync(connection.tls.key),
            }
          : {}),
      },
);

async function reap() {
  // The engine may be restarting: a few tries, then the next runtime's start-up reaps what is left.
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const containers = await docker.listContainers({ all: true, filters: { label: [instanceLabel] } });
      await Promise.all(
        containers.map((c) =>
          docker
            .getContainer(c.Id)
            .remove({ force: true, v: true })
            .catch(() => undefined),
        ),
      );
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }
}

process.stdin.on('error', () => undefined);
process.stdin.once('close', () =>
  reap().finally(() => {
    fs.rmSync(stateDir, { recursive: true, force: true });
    process.exit(0);
  }),
);
process.stdin.resume();
