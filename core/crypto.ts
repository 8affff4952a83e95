import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import canonicalize from 'canonicalize';

/** RFC 8785 (JSON Canonicalization Scheme): one byte string per JSON value, so hashes and MACs are stable. */
export function canonicalJson(value: unknown): string {
  // A well-formed string's RFC 8785 form is exactly its JSON.stringify form; proofs hash many of them.
  if (typeof value === 'string' && value.isWellFormed()) return JSON.stringify(value);
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError('value has no JSON form');
  return text;
}

export const sha256Hex = (data: string | Uint8Array): string =>
  createHash('sha256').update(data).digest('hex');

export const hmacSha256 = (key: Uint8Array, data: string | Uint8Array): Buffer =>
  createHmac('sha256', key).update(data).digest();

/** Constant-time comparison of two hex or base64url strings of MAC output. */
export function sameMac(a: string, b: string): boolean {
  const [left, right] = [Buffer.from(a), Buffer.from(b)];
  return left.length === right.length && timingSafeEqual(left, right);
}
