import { expect } from 'chai';
import teeNone from '../../attestation/none/index.ts';
import { SecretRegistry } from '../../core/log.ts';
import { quietLogger } from '../support/kernel.ts';

const create = (config: Record<string, unknown>, secrets = new SecretRegistry()) =>
  teeNone.create({ config: teeNone.config.parse(config), deps: { secrets }, logger: quietLogger() });

describe('tee-none keys', () => {
  it('derives the same key from the same keyMaterial in every process, and says it comes from config', async () => {
    const material = 'canary-tee-none-key-material-0123456789';
    const secrets = new SecretRegistry();
    const [a, b] = [
      await create({ keyMaterial: material }, secrets),
      await create({ keyMaterial: material }),
    ];
    const [keyA, keyB] = [await a.signingKey('execution-proof'), await b.signingKey('execution-proof')];
    expect(Buffer.from(keyA.key).equals(Buffer.from(keyB.key))).to.equal(true);
    expect(keyA.source).to.equal('config');
    expect((await a.status()).keySource).to.equal('config');
    expect(secrets.scrub(`leaked ${material}`)).to.equal('leaked [REDACTED]');
  });

  it('without keyMaterial, keys are random per process and reported as ephemeral', async () => {
    const [a, b] = [await create({}), await create({})];
    const keyA = await a.signingKey('execution-proof');
    expect(keyA.source).to.equal('ephemeral');
    expect(Buffer.from(keyA.key).equals(Buffer.from((await a.signingKey('execution-proof')).key))).to.equal(
      true,
    );
    expect(Buffer.from(keyA.key).equals(Buffer.from((await b.signingKey('execution-proof')).key))).to.equal(
      false,
    );
  });

  it('refuses short key material', () => {
    expect(teeNone.config.safeParse({ keyMaterial: 'short' }).success).to.equal(false);
  });
});
