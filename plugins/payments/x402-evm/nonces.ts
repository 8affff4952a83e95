import type { Address, Client } from 'viem';
import { getTransactionCount } from 'viem/actions';
import type { NonceManager } from 'viem/nonce';

interface NonceKey {
  address: Address;
  chainId: number;
}

/**
 * Transaction nonces counted in this process after one read of the chain's pending count. viem's
 * JSON-RPC nonce manager reads the count before every transaction (a round trip per settlement);
 * this one reads it again only after a reset (a send refused). One per settling account, not viem's
 * process-wide one: another rail in this process on a chain with the same id (a dev chain started
 * again) must not inherit nonces that chain has not reached.
 *
 * A nonce may be taken and held (`hold`) by a transaction signed ahead of its send: the chain's
 * pending count does not know it until the node has it, so a count read again meanwhile would hand
 * it out a second time, and one of the two transactions would replace or block the other. Held
 * nonces are skipped, whatever the chain says, until `release` (the node answered its send, or it
 * is never sent).
 */
export class LocalNonces implements NonceManager {
  private readonly next = new Map<string, Promise<number>>();
  private readonly held = new Map<string, Set<number>>();

  get = ({ address, chainId, client }: NonceKey & { client: Client }): Promise<number> => {
    const key = keyOf({ address, chainId });
    const known = this.next.get(key);
    if (known) return known;
    const read = getTransactionCount(client, { address, blockTag: 'pending' }).then((count) =>
      this.free(key, count),
    );
    this.store(key, read);
    return read;
  };

  consume = (parameters: NonceKey & { client: Client }): Promise<number> => {
    const nonce = this.get(parameters);
    this.increment(parameters);
    return nonce;
  };

  increment = (parameters: NonceKey): void => {
    const key = keyOf(parameters);
    const nonce = this.next.get(key);
    if (nonce)
      this.store(
        key,
        nonce.then((value) => this.free(key, value + 1)),
      );
  };

  reset = (parameters: NonceKey): void => void this.next.delete(keyOf(parameters));

  /** The next nonce, held: never handed out again, nor skipped by a reset, until released. */
  hold(parameters: NonceKey & { client: Client }): Promise<number> {
    const key = keyOf(parameters);
    return this.consume(parameters).then((nonce) => {
      let held = this.held.get(key);
      if (!held) this.held.set(key, (held = new Set()));
      held.add(nonce);
      return nonce;
    });
  }

  /** The node answered the held nonce's transaction (it is counted by the chain now, or refused). */
  release(parameters: NonceKey, nonce: number): void {
    const key = keyOf(parameters);
    const held = this.held.get(key);
    held?.delete(nonce);
    if (held?.size === 0) this.held.delete(key);
  }

  /** The first nonce from `from` on that no transaction signed ahead holds. */
  private free(key: string, from: number): number {
    const held = this.held.get(key);
    let nonce = from;
    while (held?.has(nonce)) nonce += 1;
    return nonce;
  }

  private store(key: string, nonce: Promise<number>): void {
    this.next.set(key, nonce);
    // A failed read is not kept: the next transaction reads the chain again.
    nonce.catch(() => this.next.get(key) === nonce && this.next.delete(key));
  }
}

const keyOf = ({ address, chainId }: NonceKey): string => `${address}.${chainId}`;
