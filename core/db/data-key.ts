import { randomBytes } from 'node:crypto';
import { SigilError } from '@sigil/plugin-api';
import { hkdfSha256, openAesGcm, sealAesGcm, type SealedBox } from '../crypto.ts';
import type { Logger } from '../log.ts';

/** How a secret the database keeps is kept at rest: sealed under `database.dataKey` (SIGIL_DATA_KEY) when there is one. */
export interface KeyAtRest {
  dataKey: string | undefined;
  logger: Logger;
  /** In production a secret kept in plain text is worth a warning. */
  production: boolean;
}

/** Where one kind of secret is kept: what binds its box to that place, and its name for people. */
export interface SecretPlace {
  /** HKDF info of the key that seals it, derived from the data key and a salt. */
  info: string;
  /** Additional data: a box copied into another table or row does not open. */
  aad: string;
  /** e.g. "the session signing key", in messages. */
  name: string;
}

/** A secret sealed with AES-256-GCM under a key derived (HKDF-SHA256) from the data key and a salt. */
interface SealedSecret extends SealedBox {
  sealed: 'aes-256-gcm';
  salt: string;
}

function sealedOf(stored: string): SealedSecret | undefined {
  try {
    const value = JSON.parse(stored) as Partial<SealedSecret> | null;
    return value?.sealed === 'aes-256-gcm' ? (value as SealedSecret) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A secret the database keeps (a key generated once so that replicas share it), sealed at rest under
 * the data key when one is configured, in plain text otherwise.
 */
export class SecretAtRest {
  constructor(
    private readonly atRest: KeyAtRest,
    private readonly place: SecretPlace,
  ) {}

  /** The text as the database keeps it: sealed under the data key when one is configured. */
  stored(plaintext: string): string {
    const { dataKey } = this.atRest;
    if (dataKey === undefined) return plaintext;
    const salt = randomBytes(16);
    const box = sealAesGcm(this.key(dataKey, salt), plaintext, this.place.aad);
    return JSON.stringify({
      sealed: 'aes-256-gcm',
      salt: salt.toString('base64'),
      ...box,
    } satisfies SealedSecret);
  }

  /**
   * The secret a stored value holds. One kept in plain text is sealed now when a data key is
   * configured (`reseal` writes the sealed text, unless a replica did first), else warned of in
   * production; one sealed without the data key, or under another, stops start-up.
   */
  async read(stored: string, reseal: (sealed: string) => Promise<unknown>): Promise<string> {
    const sealed = sealedOf(stored);
    if (sealed !== undefined) return this.open(sealed);
    if (this.atRest.dataKey !== undefined) await reseal(this.stored(stored));
    else if (this.atRest.production)
      this.atRest.logger.warn(
        `${this.place.name} is kept in the database in plain text: set SIGIL_DATA_KEY (database.dataKey) to encrypt it at rest`,
      );
    return stored;
  }

  private open(sealed: SealedSecret): string {
    const { dataKey } = this.atRest;
    const refused = (cause?: unknown) =>
      new SigilError(
        'config_invalid',
        dataKey === undefined
          ? `${capitalized(this.place.name)} in the database is encrypted, and no data key is configured`
          : `${capitalized(this.place.name)} in the database does not open with the configured data key`,
        {
          hint: 'Set SIGIL_DATA_KEY (database.dataKey) to the data key it was sealed with',
          ...(cause === undefined ? {} : { cause }),
        },
      );
    if (dataKey === undefined) throw refused();
    try {
      return openAesGcm(this.key(dataKey, Buffer.from(sealed.salt, 'base64')), sealed, this.place.aad);
    } catch (cause) {
      throw refused(cause);
    }
  }

  private key(dataKey: string, salt: Buffer): Buffer {
    return hkdfSha256(dataKey, salt, this.place.info);
  }
}

const capitalized = (text: string): string => text.charAt(0).toUpperCase() + text.slice(1);
