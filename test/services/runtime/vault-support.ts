import { isSigilError, type SigilError } from '@sigil/plugin-api';
import type { VaultSession } from '../../../services/runtime/vault/index.ts';

/** The session a runtime JWT stands for, as the chat hands it to `providerKey`. */
export function sessionOf(jwt: string, address: `0x${string}`): VaultSession {
  const claims = JSON.parse(Buffer.from(jwt.split('.')[1] as string, 'base64url').toString()) as {
    jti: string;
    exp: number;
  };
  return { address, session: { id: claims.jti, expiresAt: new Date(claims.exp * 1000) } };
}

/** The SigilError `promise` rejects with; anything else (or a resolution) fails the test. */
export async function refusal(promise: Promise<unknown>): Promise<SigilError> {
  try {
    await promise;
  } catch (err) {
    if (isSigilError(err)) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}
