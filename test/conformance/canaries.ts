import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { SignJWT, generateKeyPair } from 'jose';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';

/**
 * Real secrets of every kind the runner may meet, made fresh per test run. A test plants them in
 * evidence, reasons and server answers, then searches the output for them: any hit is a leak.
 */
export interface Canaries {
  /** 0x-prefixed 32-byte key, as viem makes them. */
  privateKey: string;
  /** The same kind of key without 0x, as a tester might paste it; caught only as a known secret. */
  bareHexKey: string;
  /** An EIP-191 signature (65 bytes of hex). */
  walletSignature: string;
  /** An ES256 session JWT. */
  jwt: string;
  walletToken: string;
  /** A bearer token of no recognisable format, as another implementation might issue. */
  opaqueBearer: string;
  /** The byte sequence of an ERC-8128 `Signature` header. */
  httpSignature: string;
  pemPrivateKey: string;
}

export async function makeCanaries(): Promise<Canaries> {
  const privateKey = generatePrivateKey();
  const account = privateKeyToAccount(privateKey);
  const { privateKey: signingKey } = await generateKeyPair('ES256');
  const jwt = await new SignJWT({ sub: account.address })
    .setProtectedHeader({ alg: 'ES256' })
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(signingKey);
  return {
    privateKey,
    bareHexKey: generatePrivateKey().slice(2),
    walletSignature: await account.signMessage({ message: 'canary' }),
    jwt,
    walletToken: `sigil_wt_${randomBytes(32).toString('base64url')}`,
    opaqueBearer: `opaque${randomBytes(12).toString('hex')}`,
    httpSignature: randomBytes(65).toString('base64'),
    pemPrivateKey: generateKeyPairSync('ec', { namedCurve: 'P-256' })
      .privateKey.export({ type: 'pkcs8', format: 'pem' })
      .toString(),
  };
}

/** Values that must never appear in anything the runner writes. */
export function secretValues(canaries: Canaries): string[] {
  return Object.values(canaries);
}

/** The canaries that leaked into `text`, by name; empty when none did. */
export function leakedIn(text: string, canaries: Canaries): string[] {
  return Object.entries(canaries)
    .filter(([, value]) => text.includes(value) || text.includes(pemBody(value)))
    .map(([name]) => name);
}

/** The base64 body of a PEM key, which JSON escaping of its newlines would otherwise hide from a search. */
function pemBody(value: string): string {
  return value.includes('-----BEGIN') ? (value.split('\n')[1] ?? value) : value;
}
