import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type JsonWebKey,
  type KeyObject,
} from 'node:crypto';
import type { Clock } from '../clock.ts';
import type { Database } from '../db/database.ts';
import { SecretAtRest, type KeyAtRest } from '../db/data-key.ts';
import { SigilError } from '@sigil/plugin-api';
import type { SecretRegistry } from '../log.ts';
import { jose } from './jose.ts';

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
  /** The private JWK as JSON, sealed under the data key when one is configured (see SecretAtRest). */
  private_jwk: string;
  created_at: number | string;
}

/**
 * The ES256 key that signs session JWTs: the configured one, or one generated once and kept in the
 * database so restarts and replicas verify each other's tokens.
 */
export class SigningKeyStore {
  private readonly configured: KeyObject | undefined;
  private readonly atRest: SecretAtRest;
  private loading: Promise<SigningKey> | undefined;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly secrets: SecretRegistry,
    configuredPem: string | undefined,
    atRest: KeyAtRest,
  ) {
    this.atRest = new SecretAtRest(atRest, {
      info: 'sigil:data-key:signing-key',
      aad: `sigil:signing_keys:${SESSION_KEY_PURPOSE}`,
      name: 'the session signing key',
    });
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
    // Kept in plain text before a data key was configured: sealed now, unless a replica did it first.
    const text = await this.atRest.read(row.private_jwk, (sealed) =>
      this.db<SigningKeyRow>('signing_keys')
        .where({ purpose: SESSION_KEY_PURPOSE, private_jwk: row.private_jwk })
        .update({ private_jwk: sealed }),
    );
    const jwk = JSON.parse(text) as JsonWebKey;
    this.secrets.add(jwk.d as string);
    return createPrivateKey({ key: jwk, format: 'jwk' });
  }

  /** The JWK as the database keeps it: sealed under the data key when one is configured. */
  private stored(jwk: JsonWebKey): string {
    return this.atRest.stored(JSON.stringify(jwk));
  }
}

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

const thumbprint = async (publicKey: KeyObject): Promise<string> =>
  (await jose()).calculateJwkThumbprint(publicKey.export({ format: 'jwk' }));
