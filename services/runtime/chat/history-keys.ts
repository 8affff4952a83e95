import { randomBytes } from 'node:crypto';
import { SigilError } from '@sigil/plugin-api';
import { openAesGcm, sealAesGcm, type SealedBox } from '../../../core/crypto.ts';

/** A key-encryption key as configured (`runtime.history.dataKeys`): its id and 32 bytes in base64. */
export interface HistoryKeyConfig {
  id: string;
  key: string;
}

/** What a session row keeps of its data key: which key wrapped it, and the wrapped key. */
export interface WrappedDataKey {
  keyId: string;
  wrapped: string;
}

/**
 * Whose data key a wrapping holds: the wrap is bound to `aad` (a key wrapped for one owner does not
 * open for another), and a refusal names it by `name`.
 */
export interface DataKeyOwner {
  aad: string;
  name: string;
}

/** A chat session's data key. */
export const sessionKeyOwner = (sessionId: string): DataKeyOwner => ({
  aad: `sigil:chat-history:data-key:${sessionId}`,
  name: `session ${sessionId}`,
});

/**
 * Envelope encryption of the chat history: each session has a random 256-bit data key, wrapped
 * (AES-256-GCM) under a key-encryption key of the config and stored beside the session; the session's
 * content (its system prompt, each message) is sealed with AES-256-GCM under the data key. Rotating the
 * key-encryption key then rewraps 32 bytes a session, never its messages. The self-improvement
 * memory's data keys, one a wallet, are wrapped by the same keys (reflect/memory-sealer.ts).
 *
 * Written here over core/crypto's AES-GCM rather than taken from a library: it is these few lines,
 * and the libraries that do envelopes (a cloud KMS SDK, Tink) bring a service or a large dependency
 * for what node:crypto already does. Every box is bound by its additional data to where it is stored
 * (the session, and the message's seq and role), so a row copied into another place does not open.
 */
export class HistoryKeys {
  private readonly keys: ReadonlyMap<string, Buffer>;
  /** The key that wraps new data keys; undefined: history is stored in plain text. */
  readonly current: string | undefined;

  constructor(configured: readonly HistoryKeyConfig[]) {
    this.keys = new Map(configured.map(({ id, key }) => [id, Buffer.from(key, 'base64')]));
    this.current = configured[0]?.id;
  }

  /** A new data key (a session's, a wallet memory's) and its wrapped form under the current key; undefined without one. */
  newDataKey(owner: DataKeyOwner): { dataKey: Buffer; wrapped: WrappedDataKey } | undefined {
    if (this.current === undefined) return undefined;
    const dataKey = randomBytes(32);
    return { dataKey, wrapped: this.wrap(owner, dataKey) };
  }

  /** The data key wrapped under the current key (rotation). */
  wrap(owner: DataKeyOwner, dataKey: Buffer): WrappedDataKey {
    const keyId = this.current as string;
    const box = sealAesGcm(this.keys.get(keyId) as Buffer, dataKey.toString('base64'), owner.aad);
    return { keyId, wrapped: JSON.stringify(box) };
  }

  /** Opens a data key; a clear error when its key is not configured or does not open it. */
  unwrap(owner: DataKeyOwner, stored: WrappedDataKey): Buffer {
    const kek = this.keys.get(stored.keyId);
    if (kek === undefined)
      throw new SigilError(
        'unavailable',
        `The content of ${owner.name} is encrypted under data key "${stored.keyId}", which this runtime does not have`,
        {
          hint: `Add the key with id "${stored.keyId}" to runtime.history.dataKeys (RUNTIME_DATA_KEY) after the current one`,
          details: { reason: 'history_key_missing', keyId: stored.keyId },
        },
      );
    try {
      return Buffer.from(openAesGcm(kek, parseBox(stored.wrapped), owner.aad), 'base64');
    } catch {
      throw new SigilError(
        'unavailable',
        `The data key of ${owner.name} does not open under key "${stored.keyId}": the configured key is not the one it was wrapped with, or the row was altered`,
        {
          hint: `Configure the key "${stored.keyId}" was when the session began; a key id must never name two keys`,
          details: { reason: 'history_key_mismatch', keyId: stored.keyId },
        },
      );
    }
  }
}

/** Seals and opens one session's content under its data key. */
export class SessionCipher {
  constructor(
    private readonly sessionId: string,
    private readonly dataKey: Buffer,
  ) {}

  seal(text: string, place: string): string {
    return JSON.stringify(sealAesGcm(this.dataKey, text, this.aad(place)));
  }

  /** The text sealed at `place`; a box altered, or moved from another place, is refused. */
  open(stored: string, place: string): string {
    try {
      return openAesGcm(this.dataKey, parseBox(stored), this.aad(place));
    } catch {
      throw new SigilError(
        'internal',
        `A stored part of session ${this.sessionId} (${place}) failed its integrity check: it was altered or moved`,
        { details: { reason: 'history_tampered', sessionId: this.sessionId, place } },
      );
    }
  }

  private aad(place: string): string {
    return `sigil:chat-history:${this.sessionId}:${place}`;
  }
}

/** Where a session's system prompt is sealed. */
export const SYSTEM_PLACE = 'system';

/** Where a message is sealed: its seq and role are bound to the box, so rows cannot be swapped. */
export const messagePlace = (seq: number, role: string): string => `message:${seq}:${role}`;

/**
 * A stored box: a JSON SealedBox with a whole 16-byte tag (GCM would check a cut one, down to 4 bytes,
 * which makes a forgery cheap). A row that is not one fails as the altered row it is.
 */
export function parseBox(stored: string): SealedBox {
  const box = JSON.parse(stored) as Partial<SealedBox> | null;
  if (typeof box?.iv !== 'string' || typeof box.ciphertext !== 'string' || typeof box.tag !== 'string')
    throw new TypeError('not a sealed box');
  if (Buffer.from(box.tag, 'base64').length !== 16) throw new TypeError('a cut tag');
  return box as SealedBox;
}
