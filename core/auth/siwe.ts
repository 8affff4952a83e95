import { randomBytes } from 'node:crypto';
import { getAddress, type Address, type Hex } from 'viem';
import { createSiweMessage, parseSiweMessage, SiweInvalidMessageFieldError } from 'viem/siwe';
import type { Clock } from '../clock.ts';
import type { Database } from '../db/database.ts';
import { SigilError } from '../errors.ts';
import { signatureMatches } from './eoa.ts';
import { unauthorized } from './principal.ts';
import type { AuthSettings } from './settings.ts';

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

interface NonceRow {
  nonce: string;
  service: string;
  expires_at: number | string;
  used_at: number | string | null;
  client: string | null;
}

const SIWE_VERSION = '1';
/** A probe address for checking at start-up that the public URL can appear in a SIWE message. */
const PROBE_ADDRESS = '0x0000000000000000000000000000000000000001';

/**
 * Sign-In with Ethereum for one service. Nonces live in the database, so a challenge issued by one
 * replica verifies on another and survives a restart; each is consumed exactly once.
 */
export class SiweChallenges {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly settings: AuthSettings,
  ) {
    this.assertPublicUrlFits();
  }

  /**
   * A challenge for `address`, asked by `client` (its network address). Anyone may ask, so each is
   * bounded: expired challenges are deleted first, then a client holding `challengeMaxPerClient`
   * unexpired ones of this service, or the service holding `challengeMaxOutstanding`, is refused
   * (429 with Retry-After, nothing recorded). Concurrent requests may pass a limit by their number.
   */
  async issue(address: Address, client: string): Promise<Challenge> {
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + this.settings.challengeTtlSeconds * 1000);
    // Hex is alphanumeric, as EIP-4361 requires, and 128 bits cannot be guessed.
    const nonce = randomBytes(16).toString('hex');
    await this.db<NonceRow>('siwe_nonces').where('expires_at', '<=', now.getTime()).delete();
    await this.refuseOverLimit(client.slice(0, 64), now.getTime());
    await this.db<NonceRow>('siwe_nonces').insert({
      nonce,
      service: this.settings.service,
      expires_at: expiresAt.getTime(),
      used_at: null,
      client: client.slice(0, 64),
    });
    return {
      nonce,
      message: this.message(address, nonce, now, expiresAt),
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
    const fields = parseSiweMessage(message);
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
    const row = await this.db<NonceRow>('siwe_nonces').where({ nonce, service: expected.service }).first();
    if (!row) throw unauthorized('SIWE nonce was not issued by this service');
    if (row.used_at !== null) throw unauthorized('SIWE nonce has already been used');
    if (Number(row.expires_at) <= now) throw unauthorized('SIWE challenge has expired');
    const address = getAddress(fields.address);
    if (!(await signatureMatches(address, message, signature))) {
      throw unauthorized(`Signature was not made by ${address} over this message`);
    }
    // One conditional UPDATE is the consume: of two concurrent verifications, on any replica, one wins.
    const consumed = await this.db<NonceRow>('siwe_nonces')
      .where({ nonce, service: expected.service })
      .whereNull('used_at')
      .andWhere('expires_at', '>', now)
      .update({ used_at: now });
    if (consumed !== 1) throw unauthorized('SIWE nonce has already been used');
    return address;
  }

  private async refuseOverLimit(client: string, now: number): Promise<void> {
    const { service, challengeMaxPerClient, challengeMaxOutstanding } = this.settings;
    const live = () => this.db<NonceRow>('siwe_nonces').where({ service }).andWhere('expires_at', '>', now);
    // Counted up to the limit only: a full table costs no more to check than one at its limit.
    const count = async (query: ReturnType<typeof live>, limit: number) =>
      ((await query.clone().limit(limit).select('expires_at')) as Pick<NonceRow, 'expires_at'>[]).length;
    const scopes = [
      { scope: 'client', limit: challengeMaxPerClient, query: live().andWhere({ client }) },
      { scope: 'service', limit: challengeMaxOutstanding, query: live() },
    ] as const;
    for (const { scope, limit, query } of scopes) {
      if ((await count(query, limit)) < limit) continue;
      const oldest = (await query.clone().orderBy('expires_at').first('expires_at')) as
        Pick<NonceRow, 'expires_at'> | undefined;
      const retryAfter = Math.max(1, Math.ceil((Number(oldest?.expires_at ?? now) - now) / 1000));
      throw new SigilError(
        'rate_limited',
        scope === 'client'
          ? `This client holds ${limit} unexpired sign-in challenges, the most it may`
          : `This service holds ${limit} unexpired sign-in challenges, the most it keeps`,
        {
          hint: `Sign one of the challenges already issued, or ask again in ${retryAfter} s`,
          details: { reason: 'too_many_challenges', scope, limit },
          headers: { 'retry-after': String(retryAfter) },
        },
      );
    }
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

  private message(address: Address, nonce: string, issuedAt: Date, expirationTime: Date): string {
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

  /** A public URL that EIP-4361 cannot express (e.g. a single-label host) fails at start-up, not per request. */
  private assertPublicUrlFits(): void {
    const now = this.clock.now();
    try {
      this.message(PROBE_ADDRESS, 'startupprobe', now, now);
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
