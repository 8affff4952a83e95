import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { expect } from 'chai';
import { freePort } from './cli.ts';

/** Asks for `consecutive` ports: each is below the kernel's ephemeral range, and a server listens on each. */
async function expectFreeBelowEphemeral(consecutive: number): Promise<void> {
  const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
    .trim()
    .split(/\s+/)
    .map(Number);
  const first = await freePort(consecutive);
  const ports = Array.from({ length: consecutive }, (_, i) => first + i);
  for (const port of ports) expect(port).to.be.within(10_000, (low as number) - 1);
  const servers = await Promise.all(
    ports.map(
      (port) =>
        new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
          const server = createServer();
          server.once('error', reject);
          server.listen(port, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
}

describe('test support: freePort', () => {
  it('gives a port below the kernel’s ephemeral range that a server can listen on', () =>
    expectFreeBelowEphemeral(1));

  it('gives the first of two consecutive ports that both can be listened on, below that range', () =>
    expectFreeBelowEphemeral(2));
});
