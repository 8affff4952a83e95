import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { hkdfSha256, hmacSha256, openAesGcm, sealAesGcm } from '../../../core/crypto.ts';
import type { Database } from '../../../core/db/database.ts';
import { type DataKeyOwner, type HistoryKeys, parseBox } from '../chat/history-keys.ts';
import { plainDigest, type TextSealer } from './memory.ts';

/** A wallet's memory data key, as the key-encryption key wraps it (bound to the wallet). */
export const memoryKeyOwner = (wallet: string): DataKeyOwner => ({
  aad: `sigil:reflect-memory:data-key:${wallet}`,
  name: "this wallet's self-improvement memory",
});

/** What a wallet's values are sealed and digested with. */
interface WalletKey {
  dataKey: Buffer;
  digestKey: Buffer;
}

/** Unwrapped wallet keys kept in this process (the oldest goes first beyond this many). */
const CACHED_WALLETS = 1000;

/**
 * The self-improvement memory sealed at rest under the chat history's keys (`runtime.history.dataKeys`,
 * history-keys.ts). Each wallet has one random 256-bit memory data key, wrapped under the current
 * key-encryption key in `reflect_keys` (made with the wallet's first sealed value); every value is
 * sealed with AES-256-GCM under it, bound as additional data to the wallet and to its place (table,
 * row and field: `learning:<id>`), so a value copied into another row or another wallet's does not
 * open. Rotation rewraps the wallet's row, never its values (memory-rewrap.ts).
 *
 * Twins are found by a digest of the normalized statement (memory.ts). Sealed, the digest is an
 * HMAC-SHA256 under a key derived (HKDF) from the wallet's data key, not a plain SHA-256: a plain
 * hash of a short statement can be found by hashing guesses ("always answer in metric units"), and
 * would show which wallets share a statement. Keyed per wallet, it tells only that two of one
 * wallet's rows hold the same statement, which is what finding twins needs. The data key never
 * changes (rotation rewraps it), so neither do the digests. Without keys configured the memory is
 * stored as is, with plain digests; a row says which it is (`sealed`), so both kinds open.
 */
export class MemorySealer implements TextSealer {
  readonly sealing: boolean;
  private readonly cache = new Map<string, Promise<WalletKey>>();

  constructor(
    private readonly db: Database,
    private readonly keys: HistoryKeys,
    private readonly clock: Clock,
  ) {
    this.sealing = keys.current !== undefined;
  }

  async seal(wallet: string, text: string, place: string): Promise<string> {
    if (!this.sealing) return text;
    const { dataKey } = await this.walletKey(wallet);
    return JSON.stringify(sealAesGcm(dataKey, text, valueAad(wallet, place)));
  }

  async open(wallet: string, stored: string, place: string, sealed: boolean): Promise<string> {
    if (!sealed) return stored;
    const { dataKey } = await this.walletKey(wallet);
    try {
      return openAesGcm(dataKey, parseBox(stored), valueAad(wallet, place));
    } catch {
      throw memoryTampered(place);
    }
  }

  async digest(wallet: string, text: string): Promise<string> {
    if (!this.sealing) return plainDigest(text);
    return hmacSha256((await this.walletKey(wallet)).digestKey, text).toString('hex');
  }

  /** The wallet's keys: read (and unwrapped) once a process, made when sealing its first value. */
  private walletKey(wallet: string): Promise<WalletKey> {
    const cached = this.cache.get(wallet);
    if (cached) return cached;
    const loading = this.loadKey(wallet);
    this.cache.set(wallet, loading);
    if (this.cache.size > CACHED_WALLETS) this.cache.delete(this.cache.keys().next().value as string);
    // A failure (a key not configured) is not kept: the next read tries again.
    loading.catch(() => this.cache.delete(wallet));
    return loading;
  }

  private async loadKey(wallet: string): Promise<WalletKey> {
    const owner = memoryKeyOwner(wallet);
    let row = await this.keyRow(wallet);
    if (!row) {
      const fresh = this.keys.newDataKey(owner);
      // A sealed value and no key: its key row was removed (nothing in the runtime removes one).
      if (!fresh) throw memoryTampered('reflect_keys');
      // Two replicas making the wallet's first key at once: one row wins, both use it.
      await this.db('reflect_keys')
        .insert({
          wallet,
          key_id: fresh.wrapped.keyId,
          wrapped_key: fresh.wrapped.wrapped,
          created_at: this.clock.now().getTime(),
        })
        .onConflict('wallet')
        .ignore();
      row = await this.keyRow(wallet);
      if (!row) throw memoryTampered('reflect_keys');
    }
    const dataKey = this.keys.unwrap(owner, { keyId: row.key_id, wrapped: row.wrapped_key });
    return { dataKey, digestKey: hkdfSha256(dataKey, '', 'sigil:reflect-memory:statement-digest:v1') };
  }

  private async keyRow(wallet: string) {
    return (await this.db('reflect_keys').where({ wallet }).first('key_id', 'wrapped_key')) as
      { key_id: string; wrapped_key: string } | undefined;
  }
}

const valueAad = (wallet: string, place: string): string => `sigil:reflect-memory:${wallet}:${place}`;

const memoryTampered = (place: string): SigilError =>
  new SigilError(
    'internal',
    `A stored part of this wallet's self-improvement memory (${place}) failed its integrity check: it was altered or moved`,
    { details: { reason: 'memory_tampered', place } },
  );
