import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

/**
 * Where an allowed host name may lead. The proxy resolves a name once and connects to that address
 * (no second lookup a rebinding DNS server could answer differently), and refuses addresses in the
 * host's own, private or otherwise special ranges unless the operator lists the range
 * (`egress.privateRanges`) or the allow-list entry is the address itself: an allowed public name must
 * not become a way into the gateway's loopback, its LAN or a cloud metadata service.
 */

/** IANA special-purpose ranges (RFC 6890 and successors) that no public name should lead to. */
const SPECIAL_RANGES: readonly [string, number, 'ipv4' | 'ipv6'][] = [
  ['0.0.0.0', 8, 'ipv4'],
  ['10.0.0.0', 8, 'ipv4'],
  ['100.64.0.0', 10, 'ipv4'], // carrier-grade NAT
  ['127.0.0.0', 8, 'ipv4'],
  ['169.254.0.0', 16, 'ipv4'], // link-local, cloud metadata services
  ['172.16.0.0', 12, 'ipv4'],
  ['192.0.0.0', 24, 'ipv4'],
  ['192.168.0.0', 16, 'ipv4'],
  ['198.18.0.0', 15, 'ipv4'], // benchmarking
  ['224.0.0.0', 4, 'ipv4'], // multicast
  ['240.0.0.0', 4, 'ipv4'], // reserved, broadcast
  ['::', 128, 'ipv6'],
  ['::1', 128, 'ipv6'],
  ['64:ff9b::', 96, 'ipv6'], // NAT64: an IPv4 address in disguise
  ['64:ff9b:1::', 48, 'ipv6'],
  ['fc00::', 7, 'ipv6'], // unique local
  ['fe80::', 10, 'ipv6'], // link-local
  ['ff00::', 8, 'ipv6'], // multicast
];

const special = new BlockList();
for (const [network, prefix, family] of SPECIAL_RANGES) special.addSubnet(network, prefix, family);

/** `a.b.c.d/n` or `v6/n` to its parts; undefined when it is neither. */
export function parseRange(
  value: string,
): { network: string; prefix: number; family: 'ipv4' | 'ipv6' } | undefined {
  const [network = '', prefixText] = value.split('/');
  const version = isIP(network);
  if (version === 0) return undefined;
  const max = version === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) return undefined;
  return { network, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/** An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is. */
const unmapped = (address: string) => /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1] ?? address;

export class EgressAddresses {
  private readonly allowedSpecial = new BlockList();

  /** `privateRanges`: CIDR ranges (or single addresses) of special ranges names may lead to. */
  constructor(privateRanges: readonly string[]) {
    for (const entry of privateRanges) {
      const range = parseRange(entry);
      // Never met: the plugin's config schema refuses such an entry first.
      if (!range) throw new Error(`egress private range "${entry}" is not an address or CIDR range`);
      this.allowedSpecial.addSubnet(range.network, range.prefix, range.family);
    }
  }

  /**
   * The addresses to connect to for `host` (a name or a literal address from the allow-list), in the
   * resolver's order, or why there are none. A literal is its own explicit listing; a name's
   * addresses are kept only when public or in a listed range.
   */
  async pin(host: string): Promise<{ addresses: string[] } | { refused: string }> {
    if (isIP(host) !== 0) return { addresses: [host] };
    const found = await lookup(host, { all: true, verbatim: true });
    const usable = found.map(({ address }) => unmapped(address)).filter((address) => this.reachable(address));
    if (usable.length > 0) return { addresses: usable };
    return {
      refused: `${host} resolves to ${found.map((entry) => entry.address).join(', ')}, a private or special range; list the address or its range explicitly`,
    };
  }

  private reachable(address: string): boolean {
    const family = isIP(address) === 4 ? 'ipv4' : 'ipv6';
    return !special.check(address, family) || this.allowedSpecial.check(address, family);
  }
}
