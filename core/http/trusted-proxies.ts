import { BlockList, isIP } from 'node:net';
import { unmapped } from './client-connections.ts';

/**
 * The proxies (load balancers) whose `X-Forwarded-For` a service believes (`http.trustedProxies`:
 * addresses and CIDR blocks). Anyone can send the header, so from any other peer it is ignored and the
 * client is the connection's remote address.
 */
export class TrustedProxies {
  private readonly list: BlockList | undefined;

  constructor(entries: readonly string[]) {
    this.list = entries.length > 0 ? blockListOf(entries) : undefined;
  }

  /** Whether any proxy is trusted (none: the client is always the remote address). */
  get any(): boolean {
    return this.list !== undefined;
  }

  /** Whether `address` (as a socket gives it) is one of the trusted proxies. */
  trusts(address: string): boolean {
    if (this.list === undefined) return false;
    const plain = unmapped(address);
    const family = isIP(plain);
    return family !== 0 && this.list.check(plain, family === 4 ? 'ipv4' : 'ipv6');
  }

  /**
   * The client of a request that came in from `remoteAddress` with `forwardedFor` (its
   * X-Forwarded-For, '' without): from a trusted proxy, the right-most entry that is not itself a
   * trusted proxy (each proxy appends the peer it got the request from, so entries left of that one
   * are the client's own word); otherwise the remote address. IPv4 on a dual-stack socket as IPv4.
   */
  clientAddress(remoteAddress: string, forwardedFor: string): string {
    let address = unmapped(remoteAddress);
    if (!this.trusts(address) || forwardedFor === '') return address;
    const hops = forwardedFor.split(',');
    for (let at = hops.length - 1; at >= 0; at -= 1) {
      const hop = unmapped((hops[at] as string).trim());
      if (isIP(hop) === 0) break;
      address = hop;
      if (!this.trusts(hop)) break;
    }
    return address;
  }
}

function blockListOf(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const [address = '', bits] = entry.split('/');
    const family = isIP(address) === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) list.addAddress(address, family);
    else list.addSubnet(address, Number(bits), family);
  }
  return list;
}
