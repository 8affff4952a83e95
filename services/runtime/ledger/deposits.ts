import { checksumAddress } from '../../../core/chain/address.ts';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import type { DepositKeys } from './deposit-keys.ts';

export interface DepositAddress {
  wallet: string;
  /** The HD index: `m/44'/60'/0'/0/<index>` of the deposit mnemonic. */
  index: number;
  address: `0x${string}`;
}

interface Row {
  deposit_index: number | string;
  wallet: string;
  address: string | null;
}

/**
 * One deposit address per wallet: an index assigned once (the table's sequence, unique per wallet,
 * never reused) and the address derived from it, both stored, so a lost database row is the only way
 * to lose track of one, and the mnemonic alone re-derives every key.
 */
export class DepositAddresses {
  private byAddress: Map<string, DepositAddress> | undefined;

  constructor(private readonly deps: { db: Database; clock: Clock; keys: DepositKeys | undefined }) {}

  get enabled(): boolean {
    return this.deps.keys !== undefined;
  }

  private keys(): DepositKeys {
    if (!this.deps.keys) {
      throw new SigilError('unavailable', 'Deposit addresses are not configured on this runtime', {
        hint: 'The operator sets ledger.depositMnemonic (env LEDGER_DEPOSIT_MNEMONIC)',
      });
    }
    return this.deps.keys;
  }

  /** The wallet's deposit address, assigned on first use. */
  async of(wallet: string): Promise<DepositAddress> {
    const keys = this.keys();
    const owner = checksumAddress(wallet);
    const existing = await this.read(owner);
    if (existing?.address) return this.view(existing, keys);
    await this.deps.db.transaction(async (trx) => {
      const [inserted] = (await trx('ledger_deposit_addresses')
        .insert({ wallet: owner, created_at: this.deps.clock.now().getTime() })
        .onConflict('wallet')
        .ignore()
        .returning('deposit_index')) as { deposit_index: number | string }[];
      if (!inserted) return; // another request assigned it first: read theirs
      const index = Number(inserted.deposit_index);
      await trx('ledger_deposit_addresses')
        .where({ deposit_index: index })
        .update({ address: keys.address(index) });
    });
    const row = await this.read(owner);
    if (!row?.address) throw new SigilError('internal', `No deposit address recorded for ${owner}`);
    return this.view(row, keys);
  }

  /** The deposit address's owner, if `address` is one of ours (read from the database: any replica's). */
  async ownerOf(address: string): Promise<DepositAddress | undefined> {
    if (!/^0x[0-9a-fA-F]{40}$/.test(address)) return undefined;
    const row = (await this.deps
      .db('ledger_deposit_addresses')
      .where({ address: checksumAddress(address) })
      .first('deposit_index', 'wallet', 'address')) as Row | undefined;
    return row?.address
      ? { wallet: row.wallet, index: Number(row.deposit_index), address: checksumAddress(row.address) }
      : undefined;
  }

  /** Every assigned deposit address (cached per call of `refresh`). */
  async all(refresh = false): Promise<DepositAddress[]> {
    if (!this.byAddress || refresh) {
      const rows = (await this.deps
        .db('ledger_deposit_addresses')
        .whereNotNull('address')
        .orderBy('deposit_index')
        .select('deposit_index', 'wallet', 'address')) as Row[];
      this.byAddress = new Map(
        rows.map((row) => [
          (row.address as string).toLowerCase(),
          {
            wallet: row.wallet,
            index: Number(row.deposit_index),
            address: checksumAddress(row.address as string),
          },
        ]),
      );
    }
    return [...this.byAddress.values()];
  }

  /**
   * Start-up check that the configured mnemonic is the one the stored addresses came from (the first
   * and the last assigned): a different mnemonic would show wallets addresses nobody watches.
   */
  async verifyMnemonic(): Promise<void> {
    if (!this.deps.keys) return;
    const keys = this.deps.keys;
    const edge = (order: 'asc' | 'desc') =>
      this.deps
        .db('ledger_deposit_addresses')
        .whereNotNull('address')
        .orderBy('deposit_index', order)
        .first('deposit_index', 'wallet', 'address') as Promise<Row | undefined>;
    const rows = (await Promise.all([edge('asc'), edge('desc')])).filter((row) => row !== undefined);
    for (const row of rows) {
      const derived = keys.address(Number(row.deposit_index));
      if (derived.toLowerCase() !== (row.address as string).toLowerCase()) {
        throw new SigilError(
          'config_invalid',
          `ledger.depositMnemonic does not derive the deposit addresses in the database (index ${row.deposit_index} was ${row.address}, the mnemonic gives ${derived})`,
          { hint: 'Configure the mnemonic these addresses were issued from; never change it once in use' },
        );
      }
    }
  }

  private async read(wallet: string): Promise<Row | undefined> {
    return (await this.deps
      .db('ledger_deposit_addresses')
      .where({ wallet })
      .first('deposit_index', 'wallet', 'address')) as Row | undefined;
  }

  private view(row: Row, keys: DepositKeys): DepositAddress {
    const deposit = {
      wallet: row.wallet,
      index: Number(row.deposit_index),
      address: checksumAddress(row.address as string),
    };
    if (keys.address(deposit.index) !== deposit.address) {
      throw new SigilError('internal', `Deposit address ${deposit.index} does not match the mnemonic`);
    }
    this.byAddress?.set(deposit.address.toLowerCase(), deposit);
    return deposit;
  }
}
