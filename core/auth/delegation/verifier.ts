import { randomBytes } from 'node:crypto';
import type * as Jose from 'jose';
import type { JWTVerifyGetKey } from 'jose';
import type { Address } from 'viem';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import { viemUtils } from '../../chain/viem.ts';
import type { Clock } from '../../clock.ts';
import type { Logger } from '../../log.ts';
import { refuseFutureIssuedAt } from '../issued-at.ts';
import { jose } from '../jose.ts';
import { unauthorized } from '../principal.ts';
import { DELEGATED_JWT_TYPE, type Jwks, type PublishedJwk } from './keys.ts';
import { jwksSha256 } from './report-data.ts';
import type { RuntimeSource } from './source.ts';
import { evaluateTrust, type EvidenceVerifier, type RuntimeTrust } from './trust.ts';

/** The longest lifetime (exp - iat) a delegated JWT may claim: they are meant to be minutes. */
export const MAX_DELEGATED_LIFETIME_SECONDS = 900;
/** After an unknown `kid`, the JWKS is read again at most this often (a rotation needs one read). */
const REFETCH_COOLDOWN_MS = 30_000;

const jwkSchema = z.looseObject({
  kty: z.string(),
  kid: z.string().min(1).optional(),
  alg: z.string().optional(),
  crv: z.string().optional(),
  x: z.string().optional(),
  y: z.string().optional(),
  d: z.string().optional(),
});
const jwksSchema = z.looseObject({ keys: z.array(jwkSchema).max(16) });

export interface DelegationVerifierOptions {
  /** Where the runtime's JWKS and attestation are read. */
  source: RuntimeSource;
  /** The `iss` delegated JWTs carry: the runtime's public base URL. */
  issuer: string;
  /** The `aud` they must carry: this gateway's public base URL. */
  audience: string;
  cacheSeconds: number;
  requireTrusted: boolean;
  clockSkewSeconds: number;
  clock: Clock;
  logger: Logger;
  /** The TEE backends whose `verify` judges the runtime's evidence, one per platform it may run on. */
  verifiers: readonly EvidenceVerifier[];
}

export interface DelegatedCaller {
  address: Address;
  trust: RuntimeTrust;
}

/** What the gateway knows of the runtime from one reading: its keys and how far to trust them. */
interface RuntimeSnapshot {
  fetchedAt: number;
  keys: JWTVerifyGetKey;
  trust: RuntimeTrust;
}

/**
 * The gateway's side of the delegated path: verifies the runtime's per-wallet ES256 JWTs through the
 * runtime's JWKS (read again after `cacheSeconds`, and once more on an unknown `kid`, which is how a
 * rotation arrives), and judges the runtime's trust state each time it reads the JWKS.
 */
export class DelegationVerifier {
  private snapshot: RuntimeSnapshot | undefined;
  private loading: Promise<RuntimeSnapshot> | undefined;

  constructor(private readonly options: DelegationVerifierOptions) {}

  /**
   * Whether a bearer token claims to be a delegated JWT (its unverified `typ` and `iss`; the runtime's
   * session JWTs share the issuer but not the type). Only routing: such a token is then verified by
   * {@link verify}, and nothing else ever accepts it.
   */
  async claims(token: string): Promise<boolean> {
    const { decodeJwt, decodeProtectedHeader } = await jose();
    try {
      return (
        decodeProtectedHeader(token).typ === DELEGATED_JWT_TYPE &&
        decodeJwt(token).iss === this.options.issuer
      );
    } catch {
      return false;
    }
  }

  async verify(token: string): Promise<DelegatedCaller> {
    const { errors: joseErrors } = await jose();
    let snapshot = await this.current();
    let subject: string | undefined;
    try {
      subject = await this.check(token, snapshot);
    } catch (err) {
      if (!(err instanceof joseErrors.JWKSNoMatchingKey)) throw refused(joseErrors, err);
      // An unknown kid: perhaps the runtime rotated its key since the last reading.
      if (this.options.clock.now().getTime() - snapshot.fetchedAt < REFETCH_COOLDOWN_MS)
        throw refused(joseErrors, err);
      snapshot = await this.refresh();
      try {
        subject = await this.check(token, snapshot);
      } catch (again) {
        throw refused(joseErrors, again);
      }
    }
    const { getAddress, isAddress } = await viemUtils();
    if (subject === undefined || !isAddress(subject)) {
      throw unauthorized('Delegated token rejected: "sub" is not a wallet address');
    }
    if (this.options.requireTrusted && snapshot.trust.state !== 'trusted') {
      throw new SigilError(
        'unauthorized',
        `Delegated token rejected: this gateway requires a trusted runtime, and the runtime is ${snapshot.trust.state} (${snapshot.trust.reason})`,
        {
          // Signing in again changes nothing: the runtime's attestation must change.
          hint: 'The fix is on the runtime: run it in its TEE with its sealed signing key (no MCP_SIGNING_KEY overriding it; `sigil tee seal --force` seals a new one), then retry; GET /api/attestation on the gateway shows runtimeTrust',
          details: { reason: 'runtime_not_trusted', trust: snapshot.trust.state },
        },
      );
    }
    return { address: getAddress(subject), trust: snapshot.trust };
  }

  /** How far the runtime is trusted now: the last judgement, or a new one once it is `cacheSeconds` old. */
  async trust(): Promise<RuntimeTrust> {
    return (await this.current()).trust;
  }

  /**
   * The token's subject once jose has checked it, and then its times: `iat` no later than the skew
   * allows, and a lifetime within the cap both as claimed (exp − iat) and as measured from this
   * gateway's clock (exp − now, plus the skew), so no `iat` can carry the cap forward.
   */
  private async check(token: string, snapshot: RuntimeSnapshot): Promise<string | undefined> {
    const now = this.options.clock.now();
    const skew = this.options.clockSkewSeconds;
    const { errors: joseErrors, jwtVerify } = await jose();
    const { payload } = await jwtVerify(token, snapshot.keys, {
      algorithms: ['ES256'],
      typ: DELEGATED_JWT_TYPE,
      issuer: this.options.issuer,
      audience: this.options.audience,
      requiredClaims: ['sub', 'iat', 'exp', 'jti'],
      clockTolerance: skew,
      currentDate: now,
    });
    refuseFutureIssuedAt(joseErrors, payload, now, skew);
    const exp = payload.exp as number;
    const claimed = exp - (payload.iat as number);
    const remaining = exp - Math.floor(now.getTime() / 1000);
    if (claimed > MAX_DELEGATED_LIFETIME_SECONDS || remaining > MAX_DELEGATED_LIFETIME_SECONDS + skew) {
      throw new joseErrors.JWTClaimValidationFailed(
        `lives ${Math.max(claimed, remaining - skew)} s (exp - iat, or exp - now less the skew); delegated tokens may live at most ${MAX_DELEGATED_LIFETIME_SECONDS} s`,
        payload,
        'exp',
        'check_failed',
      );
    }
    return payload.sub;
  }

  private async current(): Promise<RuntimeSnapshot> {
    const snapshot = this.snapshot;
    const age = snapshot === undefined ? Infinity : this.options.clock.now().getTime() - snapshot.fetchedAt;
    if (snapshot !== undefined && age < this.options.cacheSeconds * 1000) return snapshot;
    try {
      return await this.refresh();
    } catch (err) {
      // The runtime is unreachable: its last keys stay usable for one more cache period, no longer.
      if (snapshot !== undefined && age < 2 * this.options.cacheSeconds * 1000) {
        this.options.logger.warn(
          { err, runtime: this.options.source.name },
          'runtime JWKS could not be read again; using the last one',
        );
        return snapshot;
      }
      throw err;
    }
  }

  /** One reading at a time: concurrent requests share it. A failure is not kept. */
  private refresh(): Promise<RuntimeSnapshot> {
    this.loading ??= this.read().finally(() => {
      this.loading = undefined;
    });
    return this.loading;
  }

  private async read(): Promise<RuntimeSnapshot> {
    const source = this.options.source;
    let document: z.infer<typeof jwksSchema>;
    try {
      document = jwksSchema.parse(await source.jwks());
    } catch (err) {
      throw unauthorized(
        `Delegated token cannot be verified: the runtime's JWKS (${source.name}) could not be read`,
        { reason: (err as Error).message },
      );
    }
    // Only public EC P-256 keys for ES256 can verify anything: a key of another type is never used.
    const usable = document.keys.filter(
      (key) =>
        key.kty === 'EC' &&
        key.crv === 'P-256' &&
        key.kid !== undefined &&
        typeof key.x === 'string' &&
        typeof key.y === 'string' &&
        (key.alg === undefined || key.alg === 'ES256') &&
        key.d === undefined,
    ) as unknown as PublishedJwk[];
    const jwksHash = jwksSha256(document);
    const nonce = randomBytes(32);
    const now = () => this.options.clock.now();
    let trust: RuntimeTrust;
    try {
      const report = await source.report(nonce);
      trust = await evaluateTrust({
        evidence: report.evidence,
        ...(report.reportData === undefined ? {} : { reportData: report.reportData }),
        nonce,
        jwksHash,
        verifiers: this.options.verifiers,
        now: now(),
      });
    } catch (err) {
      trust = {
        state: 'degraded_no_attestation',
        reason: `the runtime's attestation report could not be read: ${(err as Error).message}`,
        platform: 'unknown',
        jwksSha256: jwksHash.toString('hex'),
        checkedAt: now(),
      };
    }
    const previous = this.snapshot?.trust;
    const fields = {
      runtime: source.name,
      trust: trust.state,
      reason: trust.reason,
      jwksSha256: trust.jwksSha256,
    };
    if (previous?.state !== trust.state || previous.jwksSha256 !== trust.jwksSha256) {
      if (trust.state === 'trusted') this.options.logger.info(fields, 'runtime trust state');
      else this.options.logger.warn(fields, 'runtime trust state');
    }
    const snapshot: RuntimeSnapshot = {
      fetchedAt: now().getTime(),
      keys: (await jose()).createLocalJWKSet({ keys: usable }),
      trust,
    };
    this.snapshot = snapshot;
    return snapshot;
  }
}

/** Any failure to verify is a 401: a malformed token must never become a 500. */
function refused(joseErrors: typeof Jose.errors, err: unknown): Error {
  if (err instanceof joseErrors.JOSEError) return unauthorized(`Delegated token rejected: ${err.message}`);
  return unauthorized('Delegated token rejected: it could not be verified');
}

export type { Jwks };
