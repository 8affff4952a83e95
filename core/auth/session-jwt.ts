import { randomUUID } from 'node:crypto';
import type { JWTHeaderParameters } from 'jose';
import type { Address } from 'viem';
import { viemUtils } from '../chain/viem.ts';
import { unixSeconds, type Clock } from '../clock.ts';
import { refuseFutureIssuedAt } from './issued-at.ts';
import { jose } from './jose.ts';
import type { AuthSettings } from './settings.ts';
import type { SigningKey, SigningKeyStore } from './signing-key.ts';
import { unauthorized } from './principal.ts';

/** A verified session JWT: its wallet, its id (`jti`) and when it expires. */
export interface VerifiedSession {
  address: Address;
  id: string;
  expiresAt: Date;
}

export interface SessionToken {
  token: string;
  expiresAt: Date;
  expiresIn: number;
}

/** How many verified tokens `verify` remembers (the oldest verified goes first). */
const VERIFIED_TOKENS = 4096;

/** ES256 session JWTs for one service: its issuer and audience, its lifetime. */
export class SessionJwts {
  /**
   * Tokens verified under the current key, by their text: a session JWT is stateless (nothing revokes
   * one before its `exp`), so a token seen valid stays valid until it expires, which is checked again
   * on every use. An ES256 verification costs about 0.5 ms of CPU, on every request of a session.
   */
  private readonly verified = new Map<string, { session: VerifiedSession; key: SigningKey }>();

  constructor(
    private readonly keys: SigningKeyStore,
    private readonly clock: Clock,
    private readonly settings: AuthSettings,
  ) {}

  async issue(address: Address): Promise<SessionToken> {
    const key = await this.keys.current();
    const issuedAt = unixSeconds(this.clock);
    const expiresAt = issuedAt + this.settings.jwtTtlSeconds;
    const { SignJWT } = await jose();
    const token = await new SignJWT()
      .setProtectedHeader({ alg: 'ES256', typ: 'JWT', kid: key.kid })
      .setIssuer(this.settings.baseUrl)
      .setAudience(this.settings.audience)
      .setSubject(address)
      .setIssuedAt(issuedAt)
      .setExpirationTime(expiresAt)
      .setJti(randomUUID())
      .sign(key.privateKey);
    return { token, expiresAt: new Date(expiresAt * 1000), expiresIn: this.settings.jwtTtlSeconds };
  }

  /** The wallet a token was issued to, and its session; any defect is a 401 naming it. */
  async verify(token: string): Promise<VerifiedSession> {
    const key = await this.keys.current();
    const seen = this.verified.get(token);
    if (seen?.key === key && !this.expired(seen.session)) return seen.session;
    const session = await this.verifyWith(key, token);
    if (this.verified.size >= VERIFIED_TOKENS)
      this.verified.delete(this.verified.keys().next().value as string);
    this.verified.set(token, { session, key });
    return session;
  }

  /** jose's test of `exp`: expired once `exp` is at most the clock's second less the skew. */
  private expired(session: VerifiedSession): boolean {
    return session.expiresAt.getTime() / 1000 <= unixSeconds(this.clock) - this.settings.clockSkewSeconds;
  }

  private async verifyWith(key: SigningKey, token: string): Promise<VerifiedSession> {
    let subject: string | undefined;
    let id: string;
    let expiresAt: number;
    const { errors: joseErrors, jwtVerify } = await jose();
    try {
      const { payload } = await jwtVerify(
        token,
        (header: JWTHeaderParameters) => {
          if (header.kid !== key.kid) throw new joseErrors.JWKSNoMatchingKey('unknown "kid"');
          return key.publicKey;
        },
        {
          algorithms: ['ES256'],
          audience: this.settings.audience,
          issuer: this.settings.baseUrl,
          requiredClaims: ['sub', 'iat', 'exp', 'jti'],
          clockTolerance: this.settings.clockSkewSeconds,
          currentDate: this.clock.now(),
        },
      );
      refuseFutureIssuedAt(joseErrors, payload, this.clock.now(), this.settings.clockSkewSeconds);
      subject = payload.sub;
      id = String(payload.jti);
      expiresAt = (payload.exp as number) * 1000;
    } catch (err) {
      if (err instanceof joseErrors.JOSEError) throw unauthorized(`Session token rejected: ${err.message}`);
      throw err;
    }
    const { getAddress, isAddress } = await viemUtils();
    if (subject === undefined || !isAddress(subject)) {
      throw unauthorized('Session token rejected: "sub" is not a wallet address');
    }
    return { address: getAddress(subject), id, expiresAt: new Date(expiresAt) };
  }
}
