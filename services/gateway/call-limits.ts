import { BlockList, isIP } from 'node:net';
import { SigilError } from '@sigil/plugin-api';
import { clientOf as clientOfAddress, unmapped } from '../../core/http/client-connections.ts';
import type { CatalogEntry } from './catalog.ts';
import { RetryLater } from './retry-later.ts';

/** Where a call came from, enough to tell anonymous clients apart (an `IncomingRequest` is one). */
export interface CallOrigin {
  /** The connection's remote address. */
  readonly remoteAddress: string;
  header(name: string): string;
}

export interface CallerLimitsOptions {
  /** Tool calls one wallet may have in flight. */
  perWallet: number;
  /** Tool calls one anonymous client (an address; an IPv6 /64) may have in flight. */
  perAnonymousClient: number;
  /** Addresses or CIDR blocks of proxies whose X-Forwarded-For names the client. */
  trustedProxies: readonly string[];
}

/** What a refused caller is told to wait: its own calls end at their pace, so a short, fixed pause. */
const RETRY_AFTER_SECONDS = 1;

/**
 * Tool calls in flight per caller, from admission to the call's end (time queued for a process
 * included): a wallet, or an anonymous client by its address, so that no caller holds more than its
 * share of the gateway's processes or of the queue for them. Behind a proxy every anonymous client has
 * the proxy's address, unless the proxy is listed in `trustedProxies`.
 */
export class CallerLimits {
  private readonly inFlight = new Map<string, number>();
  private readonly proxies: BlockList | undefined;

  constructor(private readonly options: CallerLimitsOptions) {
    this.proxies = options.trustedProxies.length > 0 ? blockListOf(options.trustedProxies) : undefined;
  }

  /** Counts the call against its caller, or refuses it (429); give the returned caller to `release`. */
  admit(wallet: string | undefined, origin: CallOrigin | undefined): string {
    const caller = wallet ?? this.clientOf(origin);
    const limit = wallet === undefined ? this.options.perAnonymousClient : this.options.perWallet;
    const count = this.inFlight.get(caller) ?? 0;
    if (count >= limit) {
      throw new RetryLater(
        'rate_limited',
        `${wallet === undefined ? 'This client' : 'This wallet'} already has ${limit} tool calls in flight`,
        RETRY_AFTER_SECONDS,
        wallet === undefined
          ? 'Wait for a call to end; sign in with a wallet for a limit of its own'
          : 'Wait for a call to end before starting another',
      );
    }
    this.inFlight.set(caller, count + 1);
    return caller;
  }

  release(caller: string): void {
    const count = this.inFlight.get(caller) ?? 0;
    if (count > 1) this.inFlight.set(caller, count - 1);
    else this.inFlight.delete(caller);
  }

  /**
   * An anonymous client's key: its address, an IPv6 one by its /64 (one host commonly holds a whole
   * /64). From a trusted proxy, the X-Forwarded-For entry that the proxies in front of us did not add.
   */
  clientOf(origin: CallOrigin | undefined): string {
    if (!origin) return 'unknown';
    let address = unmapped(origin.remoteAddress);
    if (this.proxies && this.trusts(address)) {
      const hops = origin.header('x-forwarded-for').split(',');
      for (let at = hops.length - 1; at >= 0; at -= 1) {
        const hop = unmapped((hops[at] as string).trim());
        if (isIP(hop) === 0) break;
        address = hop;
        if (!this.trusts(hop)) break;
      }
    }
    return isIP(address) === 6 ? clientOfAddress(address) : address;
  }

  private trusts(address: string): boolean {
    const family = isIP(address);
    return family !== 0 && (this.proxies as BlockList).check(address, family === 4 ? 'ipv4' : 'ipv6');
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

/** How calls to one catalog server run. */
export interface ServerCallSettings {
  /** Its time limit: the catalog entry's, or the gateway's default. */
  timeoutMs: number;
  /** Declared stateless: anonymous callers may share its process. */
  stateless: boolean;
}

/**
 * Each catalog server's call settings, computed once; a time limit over the gateway's maximum stops
 * start-up, naming the server.
 */
export function serverCallSettings(
  entries: readonly CatalogEntry[],
  limits: { defaultSeconds: number; maxSeconds: number },
): (serverId: string) => ServerCallSettings {
  const fallback = { timeoutMs: limits.defaultSeconds * 1000, stateless: false };
  if (limits.defaultSeconds > limits.maxSeconds) {
    throw new SigilError(
      'config_invalid',
      `gateway.toolCallTimeoutSeconds (${limits.defaultSeconds}) is over gateway.maxToolCallTimeoutSeconds (${limits.maxSeconds})`,
    );
  }
  const byId = new Map<string, ServerCallSettings>();
  for (const entry of entries) {
    const seconds = entry.toolCallTimeoutSeconds ?? limits.defaultSeconds;
    if (seconds > limits.maxSeconds) {
      throw new SigilError(
        'config_invalid',
        `Catalog server "${entry.id}" sets toolCallTimeoutSeconds ${seconds}, over gateway.maxToolCallTimeoutSeconds (${limits.maxSeconds})`,
      );
    }
    byId.set(entry.id, { timeoutMs: seconds * 1000, stateless: entry.stateless });
  }
  return (serverId) => byId.get(serverId) ?? fallback;
}
