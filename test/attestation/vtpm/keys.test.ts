import { createPublicKey, generateKeyPairSync } from 'node:crypto';
import { expect } from 'chai';
import { SigilError } from '@sigil/plugin-api';
import { p256PrivateKey } from '@sigil/plugin-api/p256';
import {
  keyFor,
  keyFromHex,
  newP256Scalar,
  p256Scalar,
  randomKey,
  SEALED_PURPOSES,
} from '../../../attestation/vtpm/keys.ts';

const publicJwk = (key: Parameters<typeof createPublicKey>[0]) =>
  createPublicKey(key).export({ format: 'jwk' });

describe('tee-vtpm keys', () => {
  it('reads MCP_SIGNING_KEY as PEM or JWK into the scalar the runtime makes the same ES256 key of', () => {
    const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const jwk = JSON.stringify(privateKey.export({ format: 'jwk' }));
    const fromPem = p256Scalar(pem, 'MCP_SIGNING_KEY');
    expect(fromPem).to.have.length(32);
    expect(Buffer.from(p256Scalar(jwk, 'MCP_SIGNING_KEY')).equals(Buffer.from(fromPem))).to.equal(true);
    expect(publicJwk(p256PrivateKey(fromPem))).to.deep.equal(publicJwk(privateKey));
    expect(publicJwk(p256PrivateKey(newP256Scalar()))).to.have.property('crv', 'P-256');
  });

  it('refuses a key of another curve or no key, naming where it came from', () => {
    const p384 = generateKeyPairSync('ec', { namedCurve: 'P-384' }).privateKey.export({
      type: 'pkcs8',
      format: 'pem',
    });
    for (const given of [p384 as string, 'not a key', '{"kty":"EC"}']) {
      expect(() => p256Scalar(given, 'MCP_SIGNING_KEY'))
        .to.throw(SigilError, /MCP_SIGNING_KEY/)
        .with.property('code', 'config_invalid');
    }
    expect(() => keyFromHex('abcd', 'SIGIL_EXECUTION_PROOF_KEY')).to.throw(
      /SIGIL_EXECUTION_PROOF_KEY must be 32 bytes/,
    );
  });

  it('hands out the sealed keys as they are and derives the others, each a fresh copy', () => {
    const sealed = new Map(SEALED_PURPOSES.map((purpose) => [purpose, randomKey()]));
    const proof = keyFor(sealed, 'execution-proof');
    expect(Buffer.from(proof).equals(Buffer.from(sealed.get('execution-proof') as Uint8Array))).to.equal(
      true,
    );
    proof.fill(0);
    expect(Buffer.from(keyFor(sealed, 'execution-proof')).equals(Buffer.alloc(32))).to.equal(false);
    const vault = keyFor(sealed, 'provider-vault');
    expect(vault).to.have.length(32);
    expect(Buffer.from(vault).equals(Buffer.from(keyFor(sealed, 'provider-vault')))).to.equal(true);
    expect(Buffer.from(vault).equals(Buffer.from(keyFor(sealed, 'other')))).to.equal(false);
  });
});
