import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type * as Erc8128 from '@slicekit/erc8128';
import type { NonceStore, VerifyFailReason } from '@slicekit/erc8128';
import type { Address } from 'viem';
import { viemUtils } from '../chain/viem.ts';
import { unixSeconds, type Clock } from '../clock.ts';
import { importedOnce } from '../imported-once.ts';
import type { Database } from '../db/database.ts';
import type { IncomingRequest } from '../http/incoming.ts';
import { signatureMatches } from './eoa.ts';
import { unauthorized } from './principal.ts';
import type { AuthSettings } from './settings.ts';

/**
 * The ERC-8128 library (with the hashes it brings), imported at the first signed request (checked
 * here, or made by the runtime's operator path), not at start-up: most callers of a service never
 * sign one (issue 30).
 */
export const erc8128: () => Promise<typeof Erc8128> = importedOnce(() => import('@slicekit/erc8128'));

/** Expired replay-protection rows are swept at most this often per process. */
const PRUNE_INTERVAL_MS = 60_000;

const REASONS: Partial<Record<VerifyFailReason, string>> = {
  missing_headers: 'both Signature and Signature-Input headers are required',
  bad_signature_input: 'Signature-Input is malformed',
  bad_keyid: 'keyid must be erc8128:<chainId>:<address>',
  not_request_bound:
    'the signature must cover @authority, @method, @path, @query (when present) and content-digest (when there is a body)',
  nonce_required: 'a nonce is required',
  replayable_not_allowed: 'a nonce is required',
  replay: 'the nonce has already been used',
  expired: 'the signature has expired',
  not_yet_valid: 'the signature is not valid yet',
  validity_too_long: 'the validity window (expires - created) is too long',
  digest_required: 'a Content-Digest header is required for a request with a body',
  digest_mismatch: 'the body does not match Content-Digest',
  bad_signature: 'the signature does not match the signer in keyid',
};

interface RequestNonceRow {
  key: string;
  expires_at: number | string;
}

/** Replay protection shared by replicas: a (signer, nonce) row whose insert fails has been seen before. */
class DatabaseNonceStore implements NonceStore {
  private lastPrune = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly skewSeconds: number,
  ) {}

  async consume(key: string, ttlSeconds: number): Promise<boolean> {
    const now = this.clock.now().getTime();
    if (now - this.lastPrune >= PRUNE_INTERVAL_MS) {
      this.lastPrune = now;
      await this.db<RequestNonceRow>('request_nonces').where('expires_at', '<=', now).delete();
    }
    // Kept while the verifier could still accept the signature, i.e. until expiry plus the skew allowance.
    const inserted = await this.db<RequestNonceRow>('request_nonces')
      .insert({ key, expires_at: now + (ttlSeconds + this.skewSeconds) * 1000 })
      .onConflict('key')
      .ignore()
      .returning('key');
    return inserted.length === 1;
  }
}

/** The key is the signer plus a digest of the nonce, so a huge client nonce still fits the column. */
function nonceKey(parseKeyId: typeof Erc8128.parseKeyId, keyid: string, nonce: string): string {
  const signer = parseKeyId(keyid)?.address ?? keyid;
  return `${signer}:${createHash('sha256').update(nonce).digest('base64url')}`;
}

/** Node's headers as web Headers; repeated fields are joined as HTTP allows. */
function webHeaders(incoming: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(incoming)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
  }
  return headers;
}

/** A verified ERC-8128 request: who signed it, and what the signature covers (lower-case header names). */
export interface SignedRequest {
  signer: Address;
  covers: ReadonlySet<string>;
}

export const hasRequestSignature = (request: IncomingRequest): boolean =>
  request.header('signature') !== '' || request.header('signature-input') !== '';

/** ERC-8128 (RFC 9421 signed by an Ethereum account) verification of requests. */
export class RequestSignatures {
  private readonly nonces: NonceStore;

  constructor(
    db: Database,
    private readonly clock: Clock,
    private readonly settings: AuthSettings,
  ) {
    this.nonces = new DatabaseNonceStore(db, clock, settings.clockSkewSeconds);
  }

  /** The signer of the request and the components its signature covers; any defect is a 401 naming it. */
  async verify(incoming: IncomingRequest): Promise<SignedRequest> {
    const request = await this.webRequest(incoming);
    const { Erc8128Error, parseKeyId, verifyRequest } = await erc8128();
    const result = await verifyRequest({
      request,
      verifyMessage: ({ address, message, signature }) => signatureMatches(address, message, signature),
      nonceStore: this.nonces,
      policy: {
        now: () => unixSeconds(this.clock),
        clockSkewSec: this.settings.clockSkewSeconds,
        maxValiditySec: this.settings.requestSignatureMaxAgeSeconds,
        nonceKey: (keyid, nonce) => nonceKey(parseKeyId, keyid, nonce),
      },
    }).catch((err: unknown) => {
      // The library throws for requests it cannot even canonicalise (e.g. a covered header is missing).
      if (err instanceof Erc8128Error) throw unauthorized(`ERC-8128 signature rejected: ${err.message}`);
      throw err;
    });
    if (!result.ok) {
      throw unauthorized(`ERC-8128 signature rejected: ${REASONS[result.reason] ?? result.reason}`, {
        reason: result.reason,
      });
    }
    if (result.chainId !== this.settings.chainId) {
      throw unauthorized(
        `ERC-8128 signature rejected: chain ${result.chainId} is not accepted (expected ${this.settings.chainId})`,
      );
    }
    const { getAddress } = await viemUtils();
    return { signer: getAddress(result.address), covers: new Set(result.components) };
  }

  /**
   * The request as the client signed it: addressed to the service's public URL (so a signature made for
   * another host does not verify here, whatever Host header arrives) with the exact body bytes.
   */
  private async webRequest(incoming: IncomingRequest): Promise<Request> {
    const bodyless = incoming.method === 'GET' || incoming.method === 'HEAD';
    const body = bodyless ? undefined : await incoming.rawBody();
    return new Request(`${this.settings.baseUrl}${incoming.url}`, {
      method: incoming.method,
      headers: webHeaders(incoming.headers),
      ...(body === undefined || body.length === 0 ? {} : { body: new Uint8Array(body) }),
    });
  }
}
