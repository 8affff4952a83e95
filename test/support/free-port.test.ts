import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { expect } from 'chai';
import { freePort } from './cli.ts';

describe('test support: freePort', () => {
  it('gives a port below the kernel’s ephemeral range that a server can listen on', async () => {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    const port = await freePort();
    expect(port).to.be.within(10_000, (low as number) - 1);
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', resolve);
    });
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  it('gives the first of two consecutive ports that both can be listened on, below that range', async () => {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    const port = await freePort(2);
    expect(port + 1).to.be.within(10_001, (low as number) - 1);
    const servers = [createServer(), createServer()];
    await Promise.all(
      servers.map(
        (server, i) =>
          new Promise<void>((resolve, reject) => {
            server.once('error', reject);
            server.listen(port + i, '127.0.0.1', resolve);
          }),
      ),
    );
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  });
});
