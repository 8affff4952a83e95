import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { expect } from 'chai';
import { calculateJwkThumbprint } from 'jose';
import { DelegationKeys } from '../../../core/auth/delegation/keys.ts';
import { ManualClock } from '../../../core/clock.ts';
import { loadConfig, redactConfig } from '../../../services/config.ts';
import { SigilError } from '@sigil/plugin-api';

const keys = (current: string | undefined, previous?: string, sealed?: KeyObject) =>
  new DelegationKeys({
    current,
    previous,
    ...(sealed === undefined ? {} : { sealed }),
    clock: new ManualClock(),
    issuer: 'http://runtime.test',
    ttlSeconds: 300,
  });

describe('delegated path configuration', () => {
  const pair = () => generateKeyPairSync('ec', { namedCurve: 'P-256' });

  it('reads MCP_SIGNING_KEY, MCP_SIGNING_KEY_PREVIOUS, RUNTIME_OPERATOR_KEY and GATEWAY_RUNTIME_URL, and redacts the secrets', () => {
    const current = pair().privateKey.export({ format: 'pem', type: 'pkcs8' }) as string;
    const previous = pair().privateKey.export({ format: 'pem', type: 'pkcs8' }) as string;
    const operatorKey = `0x${'ab'.repeat(32)}`;
    const { config } = loadConfig({
      cwd: '/nonexistent',
      env: {
        MCP_SIGNING_KEY: current,
        MCP_SIGNING_KEY_PREVIOUS: previous,
        RUNTIME_OPERATOR_KEY: operatorKey,
        GATEWAY_RUNTIME_URL: 'http://runtime.internal:8080',
        GATEWAY_DELEGATION: 'false',
      },
    });
    expect(config.runtime).to.include({
      mcpSigningKey: current,
      mcpSigningKeyPrevious: previous,
      operatorKey,
    });
    expect(config.runtime.delegatedJwtTtlSeconds).to.equal(300);
    expect(config.gateway.delegation).to.deep.equal({
      enabled: false,
      runtimeUrl: 'http://runtime.internal:8080',
      cacheSeconds: 300,
      requireTrusted: false,
    });
    const printed = JSON.stringify(redactConfig(config));
    for (const secret of [current, previous, operatorKey]) expect(printed).to.not.include(secret);
  });

  it('takes a PEM (also with \\n escapes, as env files hold it) or a JWK; the same key gives the same kid', async () => {
    const { privateKey } = pair();
    const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }) as string;
    const escaped = pem.replace(/\n/g, '\\n');
    const jwk = JSON.stringify(privateKey.export({ format: 'jwk' }));
    const kids = await Promise.all([pem, escaped, jwk].map((text) => keys(text).currentKid()));
    expect(new Set(kids).size).to.equal(1);
    expect(keys(pem).source).to.equal('config');
    expect(keys(undefined).source).to.equal('ephemeral');
  });

  it('signs with the sealed key unless MCP_SIGNING_KEY names another, and vouches for the sealed key’s JWKS either way', async () => {
    const sealed = pair().privateKey;
    const sealedPem = sealed.export({ format: 'pem', type: 'pkcs8' }) as string;
    const previous = createPublicKey(pair().privateKey).export({ format: 'pem', type: 'spki' }) as string;
    const kidOf = async (key: KeyObject) => calculateJwkThumbprint(key.export({ format: 'jwk' }));

    for (const current of [undefined, sealedPem]) {
      const same = keys(current, previous, sealed);
      expect(same).to.include({ source: 'sealed', overridesSealed: false });
      expect(await same.currentKid()).to.equal(await kidOf(sealed));
      expect(await same.attestedJwks()).to.deep.equal(await same.jwks());
    }

    const other = pair().privateKey;
    const overriding = keys(other.export({ format: 'pem', type: 'pkcs8' }) as string, previous, sealed);
    expect(overriding).to.include({ source: 'config', overridesSealed: true });
    expect(await overriding.currentKid()).to.equal(await kidOf(other));
    const [served, attested] = [await overriding.jwks(), await overriding.attestedJwks()];
    expect(served.keys.map((key) => key.kid)).to.deep.equal([await kidOf(other), served.keys[1]?.kid]);
    expect(attested.keys.map((key) => key.kid)).to.deep.equal([await kidOf(sealed), served.keys[1]?.kid]);
    expect(keys(undefined)).to.include({ source: 'ephemeral', overridesSealed: false });
  });

  it('publishes a previous key given as a public key too, after the current one', async () => {
    const current = pair().privateKey;
    const previous = createPublicKey(pair().privateKey).export({ format: 'pem', type: 'spki' }) as string;
    const jwks = await keys(current.export({ format: 'pem', type: 'pkcs8' }) as string, previous).jwks();
    expect(jwks.keys).to.have.length(2);
    expect(jwks.keys[0]?.kid).to.equal(
      await keys(current.export({ format: 'pem', type: 'pkcs8' }) as string).currentKid(),
    );
  });

  it('refuses keys that cannot sign ES256, naming the config path and never the value', () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({
      format: 'pem',
      type: 'pkcs8',
    }) as string;
    const publicOnly = createPublicKey(pair().privateKey).export({ format: 'pem', type: 'spki' }) as string;
    const garbage = 'not-a-key-canary-0123456789';
    for (const [text, reason] of [
      [rsa, /EC P-256/],
      [publicOnly, /private key/],
      [garbage, /not a PEM or JWK/],
    ] as const) {
      let failure: unknown;
      try {
        keys(text);
      } catch (err) {
        failure = err;
      }
      expect(failure).to.be.instanceOf(SigilError);
      const error = failure as SigilError;
      expect(error.code).to.equal('config_invalid');
      expect(error.message).to.match(reason).and.to.include('runtime.mcpSigningKey');
      expect(`${error.message} ${error.hint ?? ''}`).to.not.include(garbage);
    }
  });
});
