import type { Knex } from 'knex';
import { authTables } from './0001-auth.ts';
import { siweNonceClients } from './0002-siwe-nonce-clients.ts';
import { siweStatelessChallenges } from './0003-siwe-stateless-challenges.ts';
import { chainIdentities } from './0004-chain-identities.ts';
import { replicasAndLeases } from './0005-replicas-and-leases.ts';
import { replicaFingerprints } from './0006-replica-fingerprints.ts';

/** A schema change. Names sort in the order they apply, so prefix them with a number. */
export interface Migration {
  name: string;
  up(db: Knex): Promise<void>;
  down(db: Knex): Promise<void>;
}

export const kernelMigrations: readonly Migration[] = [
  authTables,
  siweNonceClients,
  siweStatelessChallenges,
  chainIdentities,
  replicasAndLeases,
  replicaFingerprints,
];
