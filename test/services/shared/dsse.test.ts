import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import {
  ed25519FromRaw,
  ed25519FromSeed,
  ed25519Raw,
  envelopeVerifies,
  preAuthEncoding,
  signEnvelope,
} from '../../../services/shared/dsse.ts';

describe('DSSE envelopes (Ed25519)', () => {
  it("encodes PAE as the DSSE specification's example does, counting bytes, not characters", () => {
    expect(preAuthEncoding('http://example.com/HelloWorld', Buffer.from('hello world')).toString()).to.equal(
      'DSSEv1 29 http://example.com/HelloWorld 11 hello world',
    );
    expect(preAuthEncoding('t', Buffer.from('é')).toString()).to.equal('DSSEv1 1 t 2 é');
  });

  it('any 32 bytes are an Ed25519 seed: the same seed gives the same key, and its raw public key round-trips', () => {
    const seed = randomBytes(32);
    const raw = ed25519Raw(ed25519FromSeed(seed));
    expect(raw).to.have.length(32);
    expect(ed25519Raw(ed25519FromSeed(Buffer.from(seed))).equals(raw)).to.equal(true);
    expect(ed25519Raw(ed25519FromRaw(raw)).equals(raw)).to.equal(true);
    expect(() => ed25519FromSeed(randomBytes(31))).to.throw(RangeError);
  });

  it('verifies an envelope with its key only, and not once its payload or payload type changed', () => {
    const privateKey = ed25519FromSeed(randomBytes(32));
    const publicKey = ed25519FromRaw(ed25519Raw(privateKey));
    const envelope = signEnvelope('application/vnd.in-toto+json', Buffer.from('{"a":1}'), {
      privateKey,
      keyid: 'k',
    });
    expect(envelopeVerifies(envelope, publicKey)).to.equal(true);
    const other = ed25519FromRaw(ed25519Raw(ed25519FromSeed(randomBytes(32))));
    expect(envelopeVerifies(envelope, other)).to.equal(false);
    const payload = Buffer.from('{"a":2}').toString('base64');
    expect(envelopeVerifies({ ...envelope, payload }, publicKey)).to.equal(false);
    expect(envelopeVerifies({ ...envelope, payloadType: 'application/json' }, publicKey)).to.equal(false);
  });
});
