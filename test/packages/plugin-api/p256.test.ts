import { createPublicKey, generateKeyPairSync, sign, verify } from 'node:crypto';
import { expect } from 'chai';
import { isSigilError } from '@sigil/plugin-api';
import { p256PrivateKey } from '@sigil/plugin-api/p256';

describe('plugin API: a P-256 key from its scalar (a sealed mcp-signing-key)', () => {
  it('makes the same ES256 key as the one the scalar came from, which signs what its public key verifies', () => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const scalar = Buffer.from(privateKey.export({ format: 'jwk' }).d as string, 'base64url');
    const made = p256PrivateKey(scalar);
    expect(createPublicKey(made).export({ format: 'jwk' })).to.deep.equal(
      publicKey.export({ format: 'jwk' }),
    );
    const signature = sign('sha256', Buffer.from('delegated'), made);
    expect(verify('sha256', Buffer.from('delegated'), publicKey, signature)).to.equal(true);
  });

  it('refuses what is no P-256 scalar: another length, zero, the group order or above', () => {
    const order = Buffer.from('ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551', 'hex');
    for (const scalar of [
      Buffer.alloc(31, 1),
      Buffer.alloc(33, 1),
      Buffer.alloc(32),
      order,
      Buffer.alloc(32, 0xff),
    ]) {
      let failure: unknown;
      try {
        p256PrivateKey(scalar);
      } catch (err) {
        failure = err;
      }
      expect(isSigilError(failure), `${scalar.toString('hex')}`).to.equal(true);
      expect(failure).to.include({ code: 'invalid_request' });
      expect((failure as { details: unknown }).details).to.deep.equal({ reason: 'not_a_p256_scalar' });
    }
  });
});
