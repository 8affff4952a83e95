import { randomUUID } from 'node:crypto';
import { errors as joseErrors, jwtVerify, SignJWT, type JWTHeaderParameters } from 'jose';
import type { Address } from 'viem';
import { getAddress, isAddress } from 'viem/utils';
import { unixSeconds, type Clock } from '../clock.ts';
import { refuseFutureIssuedAt } from './issued-at.ts';
import type { AuthSettings } from './settings.ts';
import type { SigningKeyStore } from './signing-key.ts';
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

/** ES256 session JWTs for one service: its issuer and audience, its lifetime. */
export class SessionJwts {
  constructor(
    private readonly keys: SigningKeyStore,
    private readonly clock: Clock,
    private readonly settings: AuthSettings,
  ) {}

  async issue(address: Address): Promise<SessionToken> {
    const key = await this.keys.current();
    const issuedAt = unixSeconds(this.clock);
    const expiresAt = issuedAt + this.settings.jwtTtlSeconds;
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
    let subject: string | undefined;
    let id: string;
    let expiresAt: number;
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
      refuseFutureIssuedAt(payload, this.clock.now(), this.settings.clockSkewSeconds);
      subject = payload.sub;
      id = String(payload.jti);
      expiresAt = (payload.exp as number) * 1000;
    } catch (err) {
      if (err instanceof joseErrors.JOSEError) throw unauthorized(`Session token rejected: ${err.message}`);
      throw err;
    }
    if (subject === undefined || !isAddress(subject)) {
      throw unauthorized('Session token rejected: "sub" is not a wallet address');
    }
    return { address: getAddress(subject), id, expiresAt: new Date(expiresAt) };
  }
}
