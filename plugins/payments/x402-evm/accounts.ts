import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { KeptLease, type Lease, type Leases, type PluginLogger } from '@sigil/plugin-api';

/**
 * The built-in facilitator's settling accounts, one of which this process settles from. An account's
 * transaction nonces are one sequence: two processes sending from it at once take the same nonce, and
 * one transaction is refused or replaces the other. So, as relayers with a pool of signers do, each
 * replica of the gateway holds one account at a time, by a lease on the database (kept while the
 * gateway runs, taken over once its holder is dead or its lease expired): with as many accounts as
 * replicas, every replica settles from its own; a replica that holds none settles nothing (its
 * calls' settlements wait in the database for the replicas that do). Without leases (a rail made
 * alone, in one process), this process settles from the first account.
 *
 * What settles from an account (its nonce count) is built afresh (`build`) each time its lease is
 * taken: another replica may have sent from it meanwhile.
 */
export class SettlingAccounts<Settler> {
  private readonly keyOf = new Map<string, Hex>();
  private readonly kept: KeptLease | undefined;
  private built: { lease: string; settler: Settler } | undefined;

  constructor(
    private readonly keys: readonly Hex[],
    private readonly build: (key: Hex) => Settler,
    leasing?: { leases: Leases; network: string; ttlMs: number; logger?: PluginLogger },
  ) {
    if (!leasing) return;
    const { leases, network, ttlMs, logger } = leasing;
    for (const key of keys) {
      this.keyOf.set(`x402-evm:facilitator:${network}:${privateKeyToAccount(key).address}`, key);
    }
    this.kept = new KeptLease(leases, {
      names: [...this.keyOf.keys()],
      ttlMs,
      changed: (now) => {
        if (now) logger?.info({ lease: now.name }, 'payments: settling from this facilitator account');
        else
          logger?.warn(
            { accounts: keys.length },
            'payments: no facilitator account free (more gateway replicas than accounts): the replicas holding one settle this one’s calls; add accounts to facilitator.privateKeys',
          );
      },
      failed: (err) =>
        logger?.warn(
          { err: (err as Error).message },
          'payments: a facilitator account lease could not be kept',
        ),
    });
  }

  /** What settles from the account this process holds now, or undefined when it holds none. */
  current(): Settler | undefined {
    return this.kept
      ? this.settlerUnder(this.kept.current())
      : this.settlerFor('unleased', this.keys[0] as Hex);
  }

  /** What settles from the account this process holds, its lease renewed or one taken now if need be. */
  async ensure(): Promise<Settler | undefined> {
    return this.kept ? this.settlerUnder(await this.kept.ensure()) : this.current();
  }

  private settlerUnder(lease: Lease | undefined): Settler | undefined {
    const key = lease && this.keyOf.get(lease.name);
    return lease && key ? this.settlerFor(`${lease.name}#${lease.fence}`, key) : undefined;
  }

  /** Takes an account's lease when one is free (resolves once tried), and keeps it. */
  async start(): Promise<void> {
    await this.kept?.start();
  }

  /** Gives the account up, for another replica to take at once. */
  async stop(): Promise<void> {
    await this.kept?.stop();
  }

  private settlerFor(lease: string, key: Hex): Settler {
    if (this.built?.lease !== lease) this.built = { lease, settler: this.build(key) };
    return this.built.settler;
  }
}
