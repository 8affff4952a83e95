import type * as Jose from 'jose';

/**
 * Refuses a token whose `iat` is later than the verifier's clock plus the allowed skew. jose checks
 * `iat` only when given a maximum token age; without this a token "issued" in the future would pass,
 * and any lifetime measured from its `iat` would stretch by as much.
 */
export function refuseFutureIssuedAt(
  joseErrors: typeof Jose.errors,
  payload: Jose.JWTPayload,
  now: Date,
  skewSeconds: number,
): void {
  const latest = Math.floor(now.getTime() / 1000) + skewSeconds;
  if (typeof payload.iat === 'number' && payload.iat > latest) {
    throw new joseErrors.JWTClaimValidationFailed(
      `"iat" claim timestamp check failed (it is ${payload.iat - latest + skewSeconds} s in the future; the skew allowed is ${skewSeconds} s)`,
      payload,
      'iat',
      'check_failed',
    );
  }
}
