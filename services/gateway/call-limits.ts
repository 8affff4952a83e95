import { isIP } from 'node:net';
import { SigilError } from '@sigil/plugin-api';
import { clientOf as clientOfAddress, unmapped } from '../../core/http/client-connections.ts';
import type { CatalogEntry } from './catalog.ts';
import { RetryLater } from './retry-later.ts';

/** Where a call came from, enough to tell anonymous clients apart (an `IncomingRequest` is one). */
export interface CallOrigin {
  /** The client's address: the remote address, or the one a trusted proxy forwarded for. */
  readonly clientAddress: string;
}

export interface CallerLimitsOptions {
  /** Tool calls one wallet may have in flight. */
  perWallet: number;
  /** Tool calls one anonymous client (an address; an IPv6 /64) may have in flight. */
  perAnonymousClient: number;
}

/** What a refused caller is told to wait: its own calls end at their pace, so a short, fixed pause. */
const RETRY_AFTER_SECONDS = 1;

/**
 * Tool calls in flight per caller, from admission to the call's end (time queued for a process
 * included): a wallet, or an anonymous client by its address, so that no caller holds more than its
 * share of the gateway's processes or of the queue for them. Behind a proxy every anonymous client has
 * the proxy's address, unless the proxy is listed in `gateway.http.trustedProxies`.
 */
export class CallerLimits {
  private readonly inFlight = new Map<string, number>();

  constructor(private readonly options: CallerLimitsOptions) {}

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
   * /64).
   */
  clientOf(origin: CallOrigin | undefined): string {
    if (!origin) return 'unknown';
    const address = unmapped(origin.clientAddress);
    return isIP(address) === 6 ? clientOfAddress(address) : address;
  }
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
