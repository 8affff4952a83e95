import type { Server } from 'node:http';
import { isIPv4 } from 'node:net';
import type { TrustedProxies } from './trusted-proxies.ts';

const IPV4_MAPPED = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i;

/** An IPv4 client of a dual-stack socket shows as ::ffff:a.b.c.d; it is a.b.c.d. */
export function unmapped(address: string): string {
  return IPV4_MAPPED.exec(address)?.[1] ?? address;
}

/**
 * Who a connection counts against: its IPv4 address, or the /64 of its IPv6 one (a single host is
 * routinely given a whole /64, so counting by address would give it 2^64 budgets). An IPv4-mapped
 * IPv6 address counts as the IPv4 one.
 */
export function clientOf(address: string): string {
  const plain = unmapped(address);
  if (plain !== address || isIPv4(address)) return plain;
  const zone = address.indexOf('%');
  const bare = zone === -1 ? address : address.slice(0, zone);
  const [head = '', tail] = bare.split('::');
  const written = (part: string) => (part === '' ? [] : part.split(':'));
  const groups = written(head);
  // Compressed zeros before the prefix's end: only as many as the address leaves out.
  if (tail !== undefined) groups.push(...Array<string>(8 - groups.length - written(tail).length).fill('0'));
  groups.push(...written(tail ?? ''));
  return `${groups
    .slice(0, 4)
    .map((group) => parseInt(group, 16).toString(16))
    .join(':')}::/64`;
}

/**
 * Closes, as it arrives, a connection from a client (`clientOf`) that already holds `max` of the
 * server's connections, so one client cannot take the service-wide cap from everyone else. A trusted
 * proxy's connections carry many clients, which a connection does not name before its requests do:
 * they are not capped here (the service-wide cap still holds; the proxy caps its clients).
 */
export function capConnectionsPerClient(server: Server, max: number, proxies: TrustedProxies): void {
  const open = new Map<string, number>();
  server.on('connection', (socket) => {
    const address = socket.remoteAddress;
    if (address === undefined) return void socket.destroy(); // already gone
    if (proxies.trusts(address)) return;
    const client = clientOf(address);
    const count = open.get(client) ?? 0;
    if (count >= max) return void socket.destroy();
    open.set(client, count + 1);
    socket.once('close', () => {
      const left = (open.get(client) ?? 1) - 1;
      if (left === 0) open.delete(client);
      else open.set(client, left);
    });
  });
}
