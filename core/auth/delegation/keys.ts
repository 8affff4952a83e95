import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomUUID,
  type KeyObject,
} from 'node:crypto';
import type { JWK } from 'jose';
import type { Address } from 'viem';
import { unixSeconds, type Clock } from '../../clock.ts';
import { SigilError } from '@sigil/plugin-api';
import { jose } from '../jose.ts';

/** The `typ` header of a delegated JWT (RFC 8725 explicit typing): never confused with a session JWT. */
export const DELEGATED_JWT_TYPE = 'sigil-delegated+jwt';

/** A public key as the runtime publishes it in `/.well-known/jwks.json`. */
export interface PublishedJwk extends JWK {
  kty: 'EC';
  crv: 'P-256';
  x: string;
  y: string;
  kid: string;
  alg: 'ES256';
  use: 'sig';
}

export interface Jwks {
  keys: PublishedJwk[];
}

/**
 * Where the signing key came from: sealed by the TEE backend (`signingKey('mcp-signing-key')`),
 * `MCP_SIGNING_KEY`, or generated for this process (development).
 */
export type DelegationKeySource = 'sealed' | 'config' | 'ephemeral';

export interface DelegatedToken {
  token: string;
  kid: string;
  audience: string;
  issuedAt: Date;
  expiresAt: Date;
  expiresIn: number;
}

export interface DelegationKeysOptions {
  /** `runtime.mcpSigningKey`: PKCS#8 PEM or a JWK (JSON) of an EC P-256 private key. */
  current: string | undefined;
  /** `runtime.mcpSigningKeyPrevious`: the key it replaced, private or public; published, never used. */
  previous: string | undefined;
  /**
   * The key the TEE backend seals for the delegated path, where it seals one: it signs unless
   * `current` is another key, and it is always the key the runtime's reports vouch for.
   */
  sealed?: KeyObject;
  clock: Clock;
  /** JWT `iss`: the runtime's public base URL. */
  issuer: string;
  ttlSeconds: number;
}

/**
 * The runtime's delegated-path keys: one ES256 key signs per-wallet JWTs for the gateway; its public
 * half, and during a rotation the previous key's, are published as a JWKS. `kid` is the RFC 7638
 * thumbprint, so it is the same on every replica that holds the same key.
 */
export class DelegationKeys {
  readonly source: DelegationKeySource;
  /**
   * `MCP_SIGNING_KEY` is a key other than the sealed one: it signs and its JWKS is served, while the
   * reports still vouch for the sealed key's JWKS ({@link attestedJwks}).
   */
  readonly overridesSealed: boolean;
  private readonly privateKey: KeyObject;
  private readonly publicKeys: KeyObject[];
  private readonly attestedKeys: KeyObject[];
  private prepared: Promise<{ kid: string; jwks: Jwks; attested: Jwks }> | undefined;

  constructor(private readonly options: DelegationKeysOptions) {
    const configured =
      options.current === undefined
        ? undefined
        : parseKey(options.current, 'runtime.mcpSigningKey', 'private');
    const { sealed } = options;
    this.privateKey = configured ?? sealed ?? generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    if (configured === undefined) this.source = sealed === undefined ? 'ephemeral' : 'sealed';
    else this.source = sealed !== undefined && sameKey(configured, sealed) ? 'sealed' : 'config';
    this.overridesSealed = sealed !== undefined && this.source === 'config';
    const previous: KeyObject[] = [];
    if (options.previous !== undefined) {
      const key = parseKey(options.previous, 'runtime.mcpSigningKeyPrevious', 'any');
      previous.push(key.type === 'public' ? key : createPublicKey(key));
    }
    this.publicKeys = [createPublicKey(this.privateKey), ...previous];
    this.attestedKeys = [createPublicKey(sealed ?? this.privateKey), ...previous];
  }

  /** The published key set: the current key first, then the previous one. */
  async jwks(): Promise<Jwks> {
    return (await this.prepare()).jwks;
  }

  /**
   * The key set the runtime's attestation reports bind the hash of: the published one, except while
   * `MCP_SIGNING_KEY` overrides a sealed key, when it is the set the sealed key would publish.
   */
  async attestedJwks(): Promise<Jwks> {
    return (await this.prepare()).attested;
  }

  async currentKid(): Promise<string> {
    return (await this.prepare()).kid;
  }

  /** A JWT for `wallet` at `audience` (the gateway), valid `ttlSeconds` from now. */
  async sign(wallet: Address, audience: string): Promise<DelegatedToken> {
    const { kid } = await this.prepare();
    const issuedAt = unixSeconds(this.options.clock);
    const expiresAt = issuedAt + this.options.ttlSeconds;
    const { SignJWT } = await jose();
    const token = await new SignJWT()
      .setProtectedHeader({ alg: 'ES256', typ: DELEGATED_JWT_TYPE, kid })
      .setIssuer(this.options.issuer)
      .setAudience(audience)
      .setSubject(wallet)
      .setIssuedAt(issuedAt)
      .setExpirationTime(expiresAt)
      .setJti(randomUUID())
      .sign(this.privateKey);
    return {
      token,
      kid,
      audience,
      issuedAt: new Date(issuedAt * 1000),
      expiresAt: new Date(expiresAt * 1000),
      expiresIn: this.options.ttlSeconds,
    };
  }

  private prepare(): Promise<{ kid: string; jwks: Jwks; attested: Jwks }> {
    this.prepared ??= (async () => {
      const jwks = await jwksOf(this.publicKeys);
      return { kid: (jwks.keys[0] as PublishedJwk).kid, jwks, attested: await jwksOf(this.attestedKeys) };
    })();
    return this.prepared;
  }
}

const sameKey = (a: KeyObject, b: KeyObject): boolean => createPublicKey(a).equals(createPublicKey(b));

/** The JWKS of `keys`, in order, each key once. */
async function jwksOf(keys: readonly KeyObject[]): Promise<Jwks> {
  const published: PublishedJwk[] = [];
  const { calculateJwkThumbprint } = await jose();
  for (const key of keys) {
    const jwk = key.export({ format: 'jwk' }) as { x: string; y: string };
    const kid = await calculateJwkThumbprint({ kty: 'EC', crv: 'P-256', x: jwk.x, y: jwk.y });
    // A previous key equal to the current one is published once.
    if (published.some((existing) => existing.kid === kid)) continue;
    published.push({ kty: 'EC', crv: 'P-256', x: jwk.x, y: jwk.y, kid, alg: 'ES256', use: 'sig' });
  }
  return { keys: published };
}

/**
 * An EC P-256 key from PEM (PKCS#8, SEC1 or SPKI; `\n` escapes, as env files often hold them, are
 * accepted) or from a JWK in JSON. Anything else is a config error naming the path, never the value.
 */
function parseKey(text: string, path: string, kind: 'private' | 'any'): KeyObject {
  const source = text.trim();
  let key: KeyObject;
  try {
    if (source.startsWith('{')) {
      const jwk = JSON.parse(source) as JWK & { d?: string };
      key =
        jwk.d !== undefined
          ? createPrivateKey({ key: jwk as never, format: 'jwk' })
          : createPublicKey({ key: jwk as never, format: 'jwk' });
    } else {
      const pem = source.replace(/\\n/g, '\n');
      key = /PUBLIC KEY-----/.test(pem) ? createPublicKey(pem) : createPrivateKey(pem);
    }
  } catch {
    throw new SigilError('config_invalid', `${path} is not a PEM or JWK key`, {
      hint: 'openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 (a PKCS#8 PEM), or a JWK with kty EC and crv P-256',
    });
  }
  if (kind === 'private' && key.type !== 'private') {
    throw new SigilError('config_invalid', `${path} must be a private key (it signs)`);
  }
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
    throw new SigilError('config_invalid', `${path} must be an EC P-256 key (ES256)`, {
      hint: 'openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256',
    });
  }
  return key;
}
