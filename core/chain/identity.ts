import type { Knex } from 'knex';
import type { Address, Hex } from 'viem';
import type { RailChainIdentity } from '@sigil/plugin-api';
import { viemUtils } from './viem.ts';

/**
 * Which chain a part of Sigil reads: the chain id alone does not tell a dev chain started afresh (same
 * id, same token address: the operator's first contract) from the one before it; its genesis block,
 * stamped with the time it started, does.
 */
export interface ChainIdentity {
  chainId: number;
  genesisHash: Hex;
  /** The contract read there (the token). */
  contract: Address;
}

/** An identity as read (`readChainIdentity` of the plugin API) or told by a rail, its address checksummed. */
export async function chainIdentityOf(told: RailChainIdentity): Promise<ChainIdentity> {
  const { getAddress } = await viemUtils();
  return { chainId: told.chainId, genesisHash: told.genesisHash as Hex, contract: getAddress(told.contract) };
}

export function sameChain(a: ChainIdentity, b: ChainIdentity): boolean {
  return (
    a.chainId === b.chainId &&
    a.genesisHash.toLowerCase() === b.genesisHash.toLowerCase() &&
    a.contract.toLowerCase() === b.contract.toLowerCase()
  );
}

/** For log lines: short enough to read, long enough to tell two chains apart. */
export function describeChain(identity: ChainIdentity): string {
  return `chain ${identity.chainId}, genesis ${identity.genesisHash.slice(0, 10)}…, contract ${identity.contract}`;
}

interface IdentityRow {
  chain_id: number | string;
  genesis_hash: string;
  contract: string;
}

/** The chain identity `name` (`ledger`, `payments`) last recorded, if any. */
export async function recordedChain(db: Knex, name: string): Promise<ChainIdentity | undefined> {
  const row = (await db('chain_identities').where({ name }).first('chain_id', 'genesis_hash', 'contract')) as
    IdentityRow | undefined;
  if (!row) return undefined;
  const { getAddress } = await viemUtils();
  return {
    chainId: Number(row.chain_id),
    genesisHash: row.genesis_hash as Hex,
    contract: getAddress(row.contract),
  };
}

/** Records `identity` as the chain `name` reads (replacing the one before). */
export async function recordChain(
  db: Knex,
  name: string,
  identity: ChainIdentity,
  now: number,
): Promise<void> {
  await db('chain_identities')
    .insert({
      name,
      chain_id: identity.chainId,
      genesis_hash: identity.genesisHash,
      contract: identity.contract,
      recorded_at: now,
    })
    .onConflict('name')
    .merge();
}

/**
 * What start-up makes of the chain a part reads now against the one it recorded: `same`, `first`
 * (nothing recorded: record it) or `replaced` (another chain: fence what the database says about the
 * old one, then record the new one).
 */
export async function compareWithRecorded(
  db: Knex,
  name: string,
  current: ChainIdentity,
): Promise<{ verdict: 'same' | 'first' | 'replaced'; recorded: ChainIdentity | undefined }> {
  const recorded = await recordedChain(db, name);
  if (!recorded) return { verdict: 'first', recorded };
  return { verdict: sameChain(recorded, current) ? 'same' : 'replaced', recorded };
}
