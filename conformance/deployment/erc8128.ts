import { signRequest } from '@slicekit/erc8128';
import type { PrivateKeyAccount } from 'viem/accounts';
import type { DeploymentContext } from './context.ts';

/** Whom a signature is for: the chain its keyid names and the service's own base URL. */
export interface SignatureAudience {
  chainId: number;
  /**
   * The URL the service calls itself, as its SIWE challenges announce it (`uri`). A signature covers
   * the authority and path, and a service behind a proxy verifies them against its public URL, so
   * signing for this one lets a tester reach the service by another address (a port-forward, say).
   */
  baseUrl: string;
}

/**
 * ERC-8128 request signatures (RFC 9421 HTTP message signatures by an Ethereum account), made with
 * `@slicekit/erc8128` as an operator's client would: keyid `erc8128:<chainId>:<address>`, covering
 * authority, method, path and query, with a fresh nonce and a 60-second validity.
 */
export async function erc8128Headers(
  context: DeploymentContext,
  wallet: PrivateKeyAccount,
  audience: SignatureAudience,
  request: { method: 'GET' | 'POST' | 'DELETE'; path: string },
): Promise<Record<string, string>> {
  const url = `${audience.baseUrl.replace(/\/+$/, '')}${request.path}`;
  const signed = await signRequest(
    url,
    { method: request.method },
    {
      address: wallet.address,
      chainId: audience.chainId,
      signMessage: (message) => wallet.signMessage({ message: { raw: message } }),
    },
  );
  const headers = Object.fromEntries(signed.headers);
  if (headers.signature !== undefined) context.secret(headers.signature);
  return headers;
}

/** The same headers with one bit of the signature flipped: well-formed, but not the signer's. */
export function withTamperedSignature(headers: Record<string, string>): Record<string, string> {
  const match = /^([^=]+)=:([A-Za-z0-9+/=]+):$/.exec(headers.signature ?? '');
  if (!match) throw new Error('no ERC-8128 signature header to tamper with');
  const [, label, encoded] = match as unknown as [string, string, string];
  const bytes = Buffer.from(encoded, 'base64');
  const middle = Math.floor(bytes.length / 4); // inside `r`, so the signature stays well-formed
  bytes[middle] = (bytes[middle] ?? 0) ^ 0x01;
  return { ...headers, signature: `${label}=:${bytes.toString('base64')}:` };
}
