import { generateKeyPairSync } from 'node:crypto';
import { expect } from 'chai';
import { calculateJwkThumbprint } from 'jose';
import { ManualClock } from '../../../core/clock.ts';
import type { AuthSettings } from '../../../core/auth/settings.ts';
import { SessionJwts } from '../../../core/auth/session-jwt.ts';
import type { SigningKey, SigningKeyStore } from '../../../core/auth/signing-key.ts';
import { newWallet } from './support.ts';

/** A key store holding one ES256 key, as SigningKeyStore answers once loaded. */
async function keyStore(): Promise<{ store: SigningKeyStore; rotate: () => Promise<void> }> {
  const make = async (): Promise<SigningKey> => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    return {
      kid: await calculateJwkThumbprint(publicKey.export({ format: 'jwk' }) as never),
      privateKey,
      publicKey,
    };
  };
  let key = await make();
  return {
    store: { current: () => Promise.resolve(key) } as unknown as SigningKeyStore,
    rotate: async () => void (key = await make()),
  };
}

const settings = {
  baseUrl: 'http://127.0.0.1:1',
  audience: 'sigil:runtime',
  jwtTtlSeconds: 60,
  clockSkewSeconds: 5,
} as AuthSettings;

const outcome = (verifying: Promise<unknown>) =>
  verifying.then(
    (session) => ({ session }),
    (err: Error) => ({ refused: err.message }),
  );

describe('session JWTs: verified tokens remembered', () => {
  it('answers as jose does on every second around the expiry, skew included', async () => {
    const { store } = await keyStore();
    const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 0, 400));
    const remembering = new SessionJwts(store, clock, settings);
    const { token } = await remembering.issue(newWallet().address);
    await remembering.verify(token);
    for (let second = 0; second <= settings.jwtTtlSeconds + settings.clockSkewSeconds + 2; second++) {
      // A fresh instance remembers nothing: jose decides alone.
      const fromJose = await outcome(new SessionJwts(store, clock, settings).verify(token));
      expect(await outcome(remembering.verify(token)), `at +${second} s`).to.deep.equal(fromJose);
      clock.advance(1000);
    }
    expect(await outcome(remembering.verify(token)))
      .to.have.property('refused')
      .that.match(/"exp"/);
  });

  it('verifies again under another key: a token of the old one is refused', async () => {
    const { store, rotate } = await keyStore();
    const jwts = new SessionJwts(store, new ManualClock(), settings);
    const { token } = await jwts.issue(newWallet().address);
    expect(await outcome(jwts.verify(token))).to.have.property('session');
    await rotate();
    expect(await outcome(jwts.verify(token)))
      .to.have.property('refused')
      .that.match(/kid/);
  });

  it('never answers one token for another', async () => {
    const { store } = await keyStore();
    const jwts = new SessionJwts(store, new ManualClock(), settings);
    const [a, b] = [newWallet().address, newWallet().address];
    const [ta, tb] = [(await jwts.issue(a)).token, (await jwts.issue(b)).token];
    for (let i = 0; i < 2; i++) {
      expect((await jwts.verify(ta)).address).to.equal(a);
      expect((await jwts.verify(tb)).address).to.equal(b);
    }
    const tampered = `${tb.slice(0, -4)}${tb.endsWith('AAAA') ? 'BBBB' : 'AAAA'}`;
    expect(await outcome(jwts.verify(tampered))).to.have.property('refused');
  });
});
