import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { SigilError, type TeeBackendV2 } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { hkdfSha256, hmacSha256 } from '../../../core/crypto.ts';
import type { Database } from '../../../core/db/database.ts';
import { SecretAtRest, type KeyAtRest } from '../../../core/db/data-key.ts';
import { readFileIfExists } from '../../../core/fs/durable.ts';
import type { Logger } from '../../../core/log.ts';

/** What the vault derives from its server key: the HMAC key of its lookups, the key of server-protected entries. */
export interface ServerKeys {
  lookup: Buffer;
  server: Buffer;
  /** Tells the key that named the lookups from another, revealing nothing of it. */
  keyId: string;
  /** Where the key comes from: `tee:sealed`, `tee:config`, or `database`. */
  source: string;
}

export interface ServerKeySettings {
  db: Database;
  clock: Clock;
  tee: TeeBackendV2;
  logger: Logger;
  /** `<VAULT_PERSISTENCE_DIR>/provider-vault`: a `server.key` kept there names the files to import. */
  filesDir: string | undefined;
  /** Whether a changed key is refused (production, or replicas sharing the database) or only logged. */
  strict: boolean;
  /** How a key drawn here is kept in the database: sealed under `database.dataKey` when there is one. */
  atRest: KeyAtRest;
}

interface KeyRow {
  key_id: string;
  source: string;
  material: string | null;
}

const ROW = 'server';

/** The key id of a server key (as the files' `key-id.json` recorded it, so the two compare). */
export const keyIdOf = (lookupKey: Buffer): string =>
  hmacSha256(lookupKey, 'sigil:provider-vault:key-id').toString('hex').slice(0, 16);

function derive(root: Buffer, source: string): ServerKeys {
  const lookup = hkdfSha256(root, 'sigil:provider-vault', 'sigil:provider-vault:v1:lookup-key');
  return {
    lookup,
    server: hkdfSha256(root, 'sigil:provider-vault', 'sigil:provider-vault:v1:server-key'),
    keyId: keyIdOf(lookup),
    source,
  };
}

/**
 * The vault's server key, one for every replica: from the TEE backend (`signingKey("provider-vault")`)
 * when it is sealed or configured, its material never written anywhere; otherwise a random key drawn
 * once and kept in `provider_vault_server_key`, sealed under `database.dataKey` when there is one (as
 * the session signing key is; a file store's `server.key` is taken over, so its files' names still
 * match). The row records
 * which key named the lookups: a replica with another one (a TEE key configured since, or sealed to
 * other hardware) is refused at start-up when strict, and reported otherwise, rather than losing every
 * stored key silently.
 */
export async function vaultServerKeys(settings: ServerKeySettings): Promise<ServerKeys> {
  const { db, logger } = settings;
  const fromTee = await settings.tee.signingKey('provider-vault');
  const tee =
    fromTee.source === 'sealed' || fromTee.source === 'config'
      ? { root: Buffer.from(fromTee.key), source: `tee:${fromTee.source}` }
      : undefined;
  const drawn = tee === undefined ? (fileKey(settings.filesDir) ?? randomBytes(32)) : undefined;
  const mine = tee ?? { root: drawn as Buffer, source: 'database' };
  const keys = derive(mine.root, mine.source);
  const row = (material: string | null) => ({
    id: ROW,
    key_id: keys.keyId,
    source: mine.source,
    material,
    updated_at: settings.clock.now().getTime(),
  });
  const atRest = new SecretAtRest(settings.atRest, {
    info: 'sigil:data-key:provider-vault-server-key',
    aad: 'sigil:provider_vault_server_key:server',
    name: 'the provider vault’s server key',
  });
  const material = drawn === undefined ? null : atRest.stored(drawn.toString('base64'));
  // Of replicas starting together, the first insert wins and every one uses its key.
  await db('provider_vault_server_key').insert(row(material)).onConflict('id').ignore();
  const stored = (await db('provider_vault_server_key').where({ id: ROW }).first()) as KeyRow;
  if (tee === undefined && stored.material !== null) {
    const text = await atRest.read(stored.material, (sealed) =>
      db('provider_vault_server_key')
        .where({ id: ROW, material: stored.material })
        .update({ material: sealed }),
    );
    return derive(Buffer.from(text, 'base64'), 'database');
  }
  if (stored.key_id === keys.keyId) return keys;
  const message = `the provider vault in the database was written under another server key (${stored.source}, now ${mine.source}): its keys cannot be found`;
  if (settings.strict) {
    throw new SigilError('config_invalid', message, {
      hint: 'Give every runtime the TEE backend configuration the vault was written with (e.g. the same tee-none keyMaterial)',
    });
  }
  logger.error(message);
  await db('provider_vault_server_key').where({ id: ROW }).update(row(material));
  return keys;
}

/** A file store's random server key, when one is there to take over. */
function fileKey(filesDir: string | undefined): Buffer | undefined {
  const text = filesDir === undefined ? undefined : readFileIfExists(join(filesDir, 'server.key'));
  return text === undefined ? undefined : Buffer.from(text.trim(), 'base64');
}
