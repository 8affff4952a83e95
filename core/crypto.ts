import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  hash,
  hkdfSync,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto';
import { configure } from 'safe-stable-stringify';

/**
 * safe-stable-stringify with sorted keys and no leniency: for JSON values its output is RFC 8785's
 * (members sorted by UTF-16 code units, numbers as ECMAScript writes them, strings as JSON.stringify
 * writes them), and what JSON cannot hold (a function, NaN, Infinity, a bigint, a cycle) is refused.
 * Chosen over `canonicalize`, which allocates a Set per member name and sorted copies: it was a twentieth
 * of a busy gateway's CPU per tool call (two canonical texts per proof), this is a quarter of that.
 * test/core/canonical-json.test.ts checks it against the RFC's examples and against `canonicalize`.
 */
const sortedStrictJson = configure({
  deterministic: true,
  strict: true,
  circularValue: TypeError,
  bigint: false,
});

/** An escaped lone surrogate (`\udXXX`) at an escape's start (after an even run of backslashes). */
const ESCAPED_LONE_SURROGATE = /(?<!\\)(?:\\\\)*\\ud[89a-f]/;

/** RFC 8785 (JSON Canonicalization Scheme): one byte string per JSON value, so hashes and MACs are stable. */
export function canonicalJson(value: unknown): string {
  // A well-formed string's RFC 8785 form is exactly its JSON.stringify form; proofs hash many of them.
  if (typeof value === 'string' && value.isWellFormed()) return JSON.stringify(value);
  const text = sortedStrictJson(value) as string | undefined;
  if (text === undefined) throw new TypeError('value has no JSON form');
  // RFC 8785 takes I-JSON, which has no lone surrogates; JSON.stringify writes them escaped (a pair as is).
  if (text.includes('\\ud') && ESCAPED_LONE_SURROGATE.test(text)) {
    throw new TypeError('a string holds a lone surrogate, which RFC 8785 cannot canonicalize');
  }
  return text;
}

// One-shot: a third of the CPU of createHash().update().digest() for the short inputs proofs hash.
export const sha256Hex = (data: string | Uint8Array): string => hash('sha256', data, 'hex');

export const sha256 = (data: string | Uint8Array): Buffer => createHash('sha256').update(data).digest();

export const hmacSha256 = (key: Uint8Array, data: string | Uint8Array): Buffer =>
  createHmac('sha256', key).update(data).digest();

const SHA256_BLOCK_BYTES = 64;
const SHA256_BYTES = 32;

/**
 * HMAC-SHA256 (RFC 2104) under one key that MACs many short messages: the key's padded blocks are
 * prepared once, and each MAC is two one-shot hashes. createHmac() sets the key up for every message,
 * and in a busy gateway that setup (OpenSSL 3 fetching the MAC and digest by name) took longer than
 * the hashing: over a microsecond per MAC, with three MACs per tool call. test/core/hmac.test.ts checks
 * it against RFC 4231 and createHmac().
 */
export class HmacSha256Key {
  /** The inner padded key, then room for a message. */
  private inner: Buffer;
  /** The outer padded key, then the inner digest. */
  private readonly outer = Buffer.alloc(SHA256_BLOCK_BYTES + SHA256_BYTES);
  private readonly innerPad = Buffer.alloc(SHA256_BLOCK_BYTES);

  constructor(key: Uint8Array) {
    const block = Buffer.alloc(SHA256_BLOCK_BYTES);
    block.set(key.length > SHA256_BLOCK_BYTES ? sha256(key) : key);
    for (let index = 0; index < SHA256_BLOCK_BYTES; index += 1) {
      this.innerPad[index] = (block[index] as number) ^ 0x36;
      this.outer[index] = (block[index] as number) ^ 0x5c;
    }
    this.inner = this.withRoom(4096);
  }

  mac(text: string, encoding: 'hex' | 'base64url'): string {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    const room = text.length * 3;
    if (this.inner.length < SHA256_BLOCK_BYTES + room) this.inner = this.withRoom(room);
    const length = this.inner.write(text, SHA256_BLOCK_BYTES, 'utf8');
    const innerDigest = hash('sha256', this.inner.subarray(0, SHA256_BLOCK_BYTES + length), 'buffer');
    this.outer.set(innerDigest, SHA256_BLOCK_BYTES);
    return hash('sha256', this.outer, encoding);
  }

  private withRoom(messageBytes: number): Buffer {
    // Never from the shared pool: the padded key stays in a buffer of its own.
    const buffer = Buffer.allocUnsafeSlow(SHA256_BLOCK_BYTES + messageBytes);
    buffer.set(this.innerPad);
    return buffer;
  }
}

/** Constant-time comparison of two hex or base64url strings of MAC output. */
export function sameMac(a: string, b: string): boolean {
  const [left, right] = [Buffer.from(a), Buffer.from(b)];
  return left.length === right.length && timingSafeEqual(left, right);
}

/** HKDF-SHA256 (RFC 5869) to a 32-byte key. */
export const hkdfSha256 = (
  ikm: Uint8Array | string,
  salt: Uint8Array | string,
  info: string,
  length = 32,
): Buffer => Buffer.from(hkdfSync('sha256', ikm, salt, info, length));

/** One AES-256-GCM ciphertext, base64 fields, as stored: a fresh 96-bit IV per seal. */
export interface SealedBox {
  iv: string;
  ciphertext: string;
  tag: string;
}

/** AES-256-GCM encryption of `plaintext` under a 32-byte key, authenticating `aad` with it. */
export function sealAesGcm(key: Uint8Array, plaintext: string, aad: string): SealedBox {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return {
    iv: iv.toString('base64'),
    ciphertext: ciphertext.toString('base64'),
    tag: cipher.getAuthTag().toString('base64'),
  };
}

/**
 * Decrypts what {@link sealAesGcm} sealed. Throws (an error naming nothing of the content) when a byte
 * of the box, the key or the AAD differs: GCM never yields a tampered or mis-keyed plaintext.
 */
export function openAesGcm(key: Uint8Array, box: SealedBox, aad: string): string {
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(box.iv, 'base64'));
  decipher.setAAD(Buffer.from(aad, 'utf8'));
  decipher.setAuthTag(Buffer.from(box.tag, 'base64'));
  return Buffer.concat([decipher.update(Buffer.from(box.ciphertext, 'base64')), decipher.final()]).toString(
    'utf8',
  );
}
