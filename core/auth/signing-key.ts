import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomBytes,
  type JsonWebKey,
  type KeyObject,
} from 'node:crypto';
import { calculateJwkThumbprint } from 'jose';
import type { Clock } from '../clock.ts';
import { hkdfSha256, openAesGcm, sealAesGcm, type SealedBox } from '../crypto.ts';
import type { Database } from '../db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Logger, SecretRegistry } from '../log.ts';

export const SESSION_KEY_PURPOSE = 'session-jwt';

export interface SigningKey {
  /** RFC 7638 thumbprint of the public key: stable across restarts and equal on every replica. */
  kid: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
}

interface SigningKeyRow {
  purpose: string;
  kid: string;
  /** The private JWK as JSON, or a {@link SealedJwk} of it when a data key is configured. */
  private_jwk: string;
  created_at: number | string;
}

/** A private JWK sealed with AES-256-GCM under a key derived (HKDF-SHA256) from the data key and a salt. */
interface SealedJwk extends SealedBox {
  sealed: 'aes-256-gcm';
  salt: string;
}

/** How a stored key is kept at rest: sealed under `database.dataKey` (SIGIL_DATA_KEY) when there is one. */
export interface KeyAtRest {
  dataKey: string | undefined;
  logger: Logger;
  /** In production a key kept in plain text is worth a warning. */
  production: boolean;
}

/**
 * The ES256 key that signs session JWTs: the configured one, or one generated once and kept in the
 * database so restarts and replicas verify each other's tokens.
 */
export class SigningKeyStore {
  private readonly configured: KeyObject | undefined;
  private loading: Promise<SigningKey> | undefined;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly secrets: SecretRegistry,
    configuredPem: string | undefined,
    private readonly atRest: KeyAtRest,
  ) {
    // Parsed here so a bad key fails at start-up, not at the first sign-in.
    this.configured = configuredPem === undefined ? undefined : parseConfiguredKey(configuredPem);
  }

  current(): Promise<SigningKey> {
    // A failed load (database down) is retried by the next request rather than cached.
    this.loading ??= this.load().catch((err: unknown) => {
      this.loading = undefined;
      throw err;
    });
    return this.loading;
  }

  private async load(): Promise<SigningKey> {
    const privateKey = this.configured ?? (await this.loadOrCreateStored());
    const publicKey = createPublicKey(privateKey);
    return { kid: await thumbprint(publicKey), privateKey, publicKey };
  }

  private async loadOrCreateStored(): Promise<KeyObject> {
    const existing = await this.readStored();
    if (existing) return existing;
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    // Insert-if-absent: when two replicas race, both read back the one row that won.
    await this.db<SigningKeyRow>('signing_keys')
      .insert({
        purpose: SESSION_KEY_PURPOSE,
        kid: await thumbprint(publicKey),
        private_jwk: this.stored(privateKey.export({ format: 'jwk' })),
        created_at: this.clock.now().getTime(),
      })
      .onConflict('purpose')
      .ignore();
    const stored = await this.readStored();
    if (!stored) throw new SigilError('internal', 'The session signing key was not persisted');
    return stored;
  }

  private async readStored(): Promise<KeyObject | undefined> {
    const row = await this.db<SigningKeyRow>('signing_keys').where({ purpose: SESSION_KEY_PURPOSE }).first();
    if (!row) return undefined;
    const stored = JSON.parse(row.private_jwk) as JsonWebKey | SealedJwk;
    const jwk = isSealed(stored) ? this.open(stored) : stored;
    this.secrets.add(jwk.d);
    if (!isSealed(stored)) {
      if (this.atRest.dataKey !== undefined) {
        // Kept in plain text before a data key was configured: sealed now, unless a replica did it first.
        await this.db<SigningKeyRow>('signing_keys')
          .where({ purpose: SESSION_KEY_PURPOSE, private_jwk: row.private_jwk })
          .update({ private_jwk: this.stored(jwk) });
      } else if (this.atRest.production) {
        this.atRest.logger.warn(
          'auth: the session signing key is kept in the database in plain text: set SIGIL_DATA_KEY (database.dataKey) to encrypt it at rest',
        );
      }
    }
    return createPrivateKey({ key: jwk, format: 'jwk' });
  }

  /** The JWK as the database keeps it: sealed under the data key when one is configured. */
  private stored(jwk: JsonWebKey): string {
    const dataKey = this.atRest.dataKey;
    if (dataKey === undefined) return JSON.stringify(jwk);
    const salt = randomBytes(16);
    const box = sealAesGcm(sealingKey(dataKey, salt), JSON.stringify(jwk), SEALED_KEY_AAD);
    const sealed: SealedJwk = { sealed: 'aes-256-gcm', salt: salt.toString('base64'), ...box };
    return JSON.stringify(sealed);
  }

  private open(sealed: SealedJwk): JsonWebKey {
    const dataKey = this.atRest.dataKey;
    const refused = (cause?: unknown) =>
      new SigilError(
        'config_invalid',
        dataKey === undefined
          ? 'The session signing key in the database is encrypted, and no data key is configured'
          : 'The session signing key in the database does not open with the configured data key',
        {
          hint: 'Set SIGIL_DATA_KEY (database.dataKey) to the data key it was sealed with',
          ...(cause === undefined ? {} : { cause }),
        },
      );
    if (dataKey === undefined) throw refused();
    try {
      return JSON.parse(
        openAesGcm(sealingKey(dataKey, Buffer.from(sealed.salt, 'base64')), sealed, SEALED_KEY_AAD),
      ) as JsonWebKey;
    } catch (cause) {
      throw refused(cause);
    }
  }
}

/** Binds a sealed key to its place: a box copied into another table or purpose does not open. */
const SEALED_KEY_AAD = `sigil:signing_keys:${SESSION_KEY_PURPOSE}`;

const isSealed = (stored: JsonWebKey | SealedJwk): stored is SealedJwk => stored.sealed === 'aes-256-gcm';

const sealingKey = (dataKey: string, salt: Buffer): Buffer =>
  hkdfSha256(dataKey, salt, 'sigil:data-key:signing-key');

function parseConfiguredKey(pem: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch (cause) {
    throw new SigilError('config_invalid', 'auth.jwtSigningKey is not a PEM private key', { cause });
  }
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
    throw new SigilError('config_invalid', 'auth.jwtSigningKey must be an EC P-256 key (ES256)', {
      hint: 'openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256',
    });
  }
  return key;
}

/** The id (RFC 7638 thumbprint) of a configured session key (`auth.jwtSigningKey`): public, as its JWTs' `kid`. */
export const configuredKeyId = (pem: string): Promise<string> =>
  thumbprint(createPublicKey(parseConfiguredKey(pem)));

const thumbprint = (publicKey: KeyObject): Promise<string> =>
  calculateJwkThumbprint(publicKey.export({ format: 'jwk' }));
