import { randomBytes } from 'node:crypto';
import { isIPv4 } from 'node:net';
import type { Address, Hex } from 'viem';
import { viemSiwe, viemUtils } from '../chain/viem.ts';
import type { Clock } from '../clock.ts';
import { hkdfSha256, hmacSha256, sameMac } from '../crypto.ts';
import type { Database } from '../db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import { signatureMatches } from './eoa.ts';
import { unauthorized } from './principal.ts';
import type { AuthSettings } from './settings.ts';
import type { SigningKeyStore } from './signing-key.ts';

export interface Challenge {
  nonce: string;
  /** The full EIP-4361 message the wallet is asked to sign. */
  message: string;
  domain: string;
  uri: string;
  chainId: number;
  issuedAt: string;
  expiresAt: string;
}

/** A used nonce, kept until its expiry so it cannot be replayed (then pruned). */
interface UsedNonceRow {
  nonce: string;
  service: string;
  expires_at: number | string;
  used_at: number | string;
}

const SIWE_VERSION = '1';
/** A probe address for checking at start-up that the public URL can appear in a SIWE message. */
const PROBE_ADDRESS = '0x0000000000000000000000000000000000000001';

/**
 * A nonce is `random ‖ expiry ‖ MAC` in hex (alphanumeric, as EIP-4361 requires; 64 characters, the
 * column's width): 96 random bits, the expiry in Unix milliseconds (48 bits), and the first 112 bits
 * of an HMAC-SHA256 over them, the service, its domain and its URI.
 */
const NONCE = /^([0-9a-f]{24})([0-9a-f]{12})([0-9a-f]{28})$/;
const RANDOM_BYTES = 12;
const EXPIRY_HEX = 12;
const MAC_HEX = 28;
/** How often a verification deletes the used nonces that expired (they can no longer be replayed). */
const PRUNE_INTERVAL_MS = 60_000;

/**
 * Sign-In with Ethereum for one service. A challenge is stateless: its nonce carries its expiry and a
 * MAC under a key derived from the session signing key (shared by replicas and restarts), so issuing
 * one writes nothing and anyone may ask for any number. Verifying checks the MAC and expiry, then
 * records the nonce as used until it expires: each is accepted exactly once, on any replica.
 */
export class SiweChallenges {
  private macKey: Promise<Buffer> | undefined;
  private lastPrune = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly settings: AuthSettings,
    private readonly keys: SigningKeyStore,
  ) {}

  /** A challenge for `address` (any case: it is checksummed); nothing is recorded until it is verified. */
  async issue(wallet: string): Promise<Challenge> {
    const address = (await viemUtils()).getAddress(wallet);
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + this.settings.challengeTtlSeconds * 1000);
    const random = randomBytes(RANDOM_BYTES).toString('hex');
    const expiry = expiresAt.getTime().toString(16).padStart(EXPIRY_HEX, '0');
    const nonce = `${random}${expiry}${await this.mac(random, expiry)}`;
    return {
      nonce,
      message: await this.message(address, nonce, now, expiresAt),
      domain: this.settings.domain,
      uri: this.settings.baseUrl,
      chainId: this.settings.chainId,
      issuedAt: now.toISOString(),
      expiresAt: expiresAt.toISOString(),
    };
  }

  /**
   * Checks the message against this service and the signature against its address, then consumes the
   * nonce. The signature is checked before the nonce is touched, so a forged attempt cannot burn it.
   */
  async verify(message: string, signature: Hex): Promise<Address> {
    const fields = (await viemSiwe()).parseSiweMessage(message);
    const { domain, uri, version, chainId, nonce, issuedAt } = fields;
    if (
      fields.address === undefined ||
      domain === undefined ||
      uri === undefined ||
      version === undefined ||
      chainId === undefined ||
      nonce === undefined ||
      issuedAt === undefined
    ) {
      throw unauthorized(
        'Not an EIP-4361 message: domain, address, URI, version, chain ID, nonce and issued-at are required',
      );
    }
    const expected = this.settings;
    if (domain !== expected.domain) {
      throw unauthorized(`SIWE domain "${domain}" is not this service's ("${expected.domain}")`);
    }
    if (fields.scheme !== undefined && fields.scheme !== expected.scheme) {
      throw unauthorized(`SIWE scheme "${fields.scheme}" is not this service's ("${expected.scheme}")`);
    }
    if (uri !== expected.baseUrl) {
      throw unauthorized(`SIWE URI "${uri}" is not this service's ("${expected.baseUrl}")`);
    }
    if (version !== SIWE_VERSION) throw unauthorized(`SIWE version "${version}" is not supported`);
    if (chainId !== expected.chainId) {
      throw unauthorized(`SIWE chain ID ${chainId} is not accepted (expected ${expected.chainId})`);
    }
    this.checkTimes(issuedAt, fields.expirationTime, fields.notBefore);
    const now = this.clock.now().getTime();
    const expiresAt = await this.expiryOf(nonce);
    if (expiresAt <= now) throw unauthorized('SIWE challenge has expired');
    const address = (await viemUtils()).getAddress(fields.address);
    if (!(await signatureMatches(address, message, signature))) {
      throw unauthorized(`Signature was not made by ${address} over this message`);
    }
    await this.pruneUsed(now);
    // The insert is the consume: of two concurrent verifications, on any replica, one wins.
    const consumed = await this.db<UsedNonceRow>('siwe_nonces')
      .insert({ nonce, service: expected.service, expires_at: expiresAt, used_at: now })
      .onConflict('nonce')
      .ignore()
      .returning('nonce');
    if (consumed.length !== 1) throw unauthorized('SIWE nonce has already been used');
    return address;
  }

  /** The nonce's expiry, once its MAC shows this service issued it. */
  private async expiryOf(nonce: string): Promise<number> {
    const [, random = '', expiry = '', tag = ''] = NONCE.exec(nonce) ?? [];
    if (!sameMac(await this.mac(random, expiry), tag) || tag === '') {
      throw unauthorized('SIWE nonce was not issued by this service');
    }
    return Number.parseInt(expiry, 16);
  }

  private async mac(random: string, expiry: string): Promise<string> {
    const { service, domain, baseUrl } = this.settings;
    const tag = hmacSha256(await this.key(), `${service}\n${domain}\n${baseUrl}\n${random}\n${expiry}`);
    return tag.toString('hex').slice(0, MAC_HEX);
  }

  /** Derived from the session signing key, so every replica (and a restart) checks the same MACs. */
  private key(): Promise<Buffer> {
    // A failed load (database down) is retried by the next request rather than cached.
    this.macKey ??= this.keys.current().then(
      ({ privateKey }) =>
        hkdfSha256(privateKey.export({ format: 'der', type: 'pkcs8' }), '', 'sigil:siwe-challenge:v1'),
      (err: unknown) => {
        this.macKey = undefined;
        throw err;
      },
    );
    return this.macKey;
  }

  /** Used nonces past their expiry cannot be replayed (the MAC check refuses them): deleted. */
  private async pruneUsed(now: number): Promise<void> {
    if (now - this.lastPrune < PRUNE_INTERVAL_MS) return;
    this.lastPrune = now;
    await this.db<UsedNonceRow>('siwe_nonces').where('expires_at', '<=', now).delete();
  }

  /** Times in the message bind too; a skew allowance forgives wallets whose clocks drift. */
  private checkTimes(issuedAt: Date, expirationTime: Date | undefined, notBefore: Date | undefined): void {
    const now = this.clock.now().getTime();
    const skew = this.settings.clockSkewSeconds * 1000;
    for (const [name, value] of [
      ['Issued At', issuedAt],
      ['Expiration Time', expirationTime],
      ['Not Before', notBefore],
    ] as const) {
      if (value !== undefined && Number.isNaN(value.getTime())) {
        throw unauthorized(`SIWE "${name}" is not an RFC 3339 date-time`);
      }
    }
    if (issuedAt.getTime() - skew > now) throw unauthorized('SIWE message is issued in the future');
    if (expirationTime !== undefined && expirationTime.getTime() + skew <= now) {
      throw unauthorized(`SIWE message expired at ${expirationTime.toISOString()}`);
    }
    if (notBefore !== undefined && notBefore.getTime() - skew > now) {
      throw unauthorized(`SIWE message is not valid before ${notBefore.toISOString()}`);
    }
  }

  private async message(
    address: Address,
    nonce: string,
    issuedAt: Date,
    expirationTime: Date,
  ): Promise<string> {
    const { createSiweMessage } = await viemSiwe();
    return createSiweMessage({
      address,
      chainId: this.settings.chainId,
      domain: this.settings.domain,
      uri: this.settings.baseUrl,
      version: SIWE_VERSION,
      nonce,
      issuedAt,
      expirationTime,
      scheme: this.settings.scheme,
      statement: `Sign in to the Sigil ${this.settings.service}.`,
    });
  }

  /**
   * A public URL that EIP-4361 cannot express (e.g. a single-label host) fails at start-up, not per
   * request: the service's start awaits this. The bind address on localhost or an IPv4 address, a
   * local service's, always fits, and is not checked: viem is then not imported before serving.
   */
  async assertPublicUrlFits(): Promise<void> {
    if (!this.settings.publicUrlConfigured && isLocalBindAddress(this.settings.baseUrl)) return;
    const { SiweInvalidMessageFieldError } = await viemSiwe();
    const now = this.clock.now();
    try {
      await this.message(PROBE_ADDRESS, 'startupprobe', now, now);
    } catch (cause) {
      if (!(cause instanceof SiweInvalidMessageFieldError)) throw cause;
      throw new SigilError(
        'config_invalid',
        `${this.settings.service}.publicUrl (${this.settings.baseUrl}) cannot be used in a SIWE message: ${cause.shortMessage}`,
        {
          hint: `Set ${this.settings.service}.publicUrl to a URL whose host is a dotted name, an IPv4 address or localhost`,
        },
      );
    }
  }
}

/** Whether `baseUrl` is http(s) on localhost or an IPv4 address: hosts EIP-4361 accepts in any message. */
function isLocalBindAddress(baseUrl: string): boolean {
  const { protocol, hostname } = new URL(baseUrl);
  return /^https?:$/.test(protocol) && (hostname === 'localhost' || isIPv4(hostname));
}
