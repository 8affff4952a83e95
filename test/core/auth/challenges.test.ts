import { expect } from 'chai';
import { describeEachDatabase } from '../../support/kernel.ts';
import { AUTH_PREFIX, errorOf, newWallet, rewriteChallenge, Services, type Challenge } from './support.ts';

const TTL_SECONDS = 300;
const REQUESTS = 10_001;
const PARALLEL = 50;
const KERNEL_TABLES = ['siwe_nonces', 'request_nonces', 'signing_keys', 'wallet_tokens'];

/**
 * The attack of issue 21 (Low), and its first fix's review: each SIWE challenge was a database row,
 * so anyone could fill the table; bounded per client address, the bound counted the proxy in front of
 * the service (one user blocked sign-in for all) or each address of an IPv6 /64 (unlimited addresses
 * filled the service-wide cap and blocked every sign-in). Now a challenge is stateless: its nonce
 * carries its expiry and a MAC, issuing writes nothing, and a verified nonce is kept, until it
 * expires, only so it cannot be replayed.
 */
describeEachDatabase('SIWE challenges are stateless, and each nonce is accepted once', (database) => {
  let services: Services;
  before(async () => {
    services = await Services.start({ database });
  });
  after(() => services?.close());

  const rowsOf = async (table: string) =>
    Number(((await services.kernel.db(table).count({ n: '*' })) as [{ n: number | string }])[0].n);
  const rows = async () =>
    Object.fromEntries(await Promise.all(KERNEL_TABLES.map(async (t) => [t, await rowsOf(t)])));

  it(`${REQUESTS} challenge requests write no row: nothing to fill, nothing to refuse anyone`, async function () {
    this.timeout(300_000);
    // The first sign-in of a fresh database makes the session signing key (the MAC key's source).
    await services.challenge('gateway', newWallet().address);
    const before = await rows();
    const nonces = new Set<string>();
    for (let sent = 0; sent < REQUESTS; sent += PARALLEL) {
      const batch = Array.from({ length: Math.min(PARALLEL, REQUESTS - sent) }, async (_, i) => {
        const service = (sent + i) % 2 === 0 ? 'gateway' : 'runtime';
        const res = await services.get(
          service,
          `${AUTH_PREFIX[service]}/challenge?address=${newWallet().address}`,
        );
        expect(res.status).to.equal(200);
        nonces.add(((await res.json()) as Challenge).nonce);
      });
      await Promise.all(batch);
    }
    expect(nonces.size).to.equal(REQUESTS);
    expect(await rows()).to.deep.equal(before);
    // And sign-in still works for anyone.
    expect(await services.signIn('gateway', newWallet())).to.be.a('string');
  });

  it('a nonce is accepted once: the replay is refused, on the same or the other signature', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('runtime', wallet.address);
    const signature = await wallet.signMessage({ message: challenge.message });
    expect((await services.verify('runtime', challenge.message, signature)).status).to.equal(200);
    const concurrent = await Promise.all(
      [0, 1].map(() => services.verify('runtime', challenge.message, signature)),
    );
    for (const res of concurrent) {
      const error = await errorOf(res);
      expect(error).to.include({ status: 401, code: 'unauthorized' });
      expect(error.message).to.match(/already been used/);
    }
  });

  it('of concurrent verifications of one nonce, exactly one signs in', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const signature = await wallet.signMessage({ message: challenge.message });
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => services.verify('gateway', challenge.message, signature)),
    );
    expect(answers.filter((res) => res.status === 200)).to.have.length(1);
    expect(answers.filter((res) => res.status === 401)).to.have.length(7);
  });

  it('a forged nonce is refused and writes nothing: made up, or a real one with its expiry moved', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const later = (Number.parseInt(challenge.nonce.slice(24, 36), 16) + 3_600_000)
      .toString(16)
      .padStart(12, '0');
    const forged = [
      '0'.repeat(64),
      challenge.nonce.replace(/.$/, (c) => (c === '0' ? '1' : '0')),
      `${challenge.nonce.slice(0, 24)}${later}${challenge.nonce.slice(36)}`,
      `${challenge.nonce}00`,
      'abcdefgh',
    ];
    const before = await rows();
    for (const nonce of forged) {
      const message = rewriteChallenge(challenge, { nonce });
      const error = await errorOf(
        await services.verify('gateway', message, await wallet.signMessage({ message })),
      );
      expect(error, nonce).to.include({ status: 401, code: 'unauthorized' });
      expect(error.message, nonce).to.match(/not issued by this service/);
    }
    expect(await rows()).to.deep.equal(before);
    // The real one still works.
    const signature = await wallet.signMessage({ message: challenge.message });
    expect((await services.verify('gateway', challenge.message, signature)).status).to.equal(200);
  });

  it('an expired nonce is refused, even in a message without its own expiration time', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const message = rewriteChallenge(challenge, { expirationTime: undefined });
    const signature = await wallet.signMessage({ message });
    services.clock.advance(TTL_SECONDS * 1000);
    const error = await errorOf(await services.verify('gateway', message, signature));
    expect(error).to.include({ status: 401, code: 'unauthorized' });
    expect(error.message).to.match(/challenge has expired/);
  });

  it('a used nonce is kept until it expires, then deleted; its replay is still refused', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const message = rewriteChallenge(challenge, { expirationTime: undefined });
    const signature = await wallet.signMessage({ message });
    expect((await services.verify('gateway', message, signature)).status).to.equal(200);
    expect(await services.kernel.db('siwe_nonces').where({ nonce: challenge.nonce }).first()).to.include({
      service: 'gateway',
    });
    services.clock.advance(TTL_SECONDS * 1000 + 60_000);
    // The next verification prunes expired nonces.
    await services.signIn('gateway', newWallet());
    expect(await services.kernel.db('siwe_nonces').where({ nonce: challenge.nonce }).first()).to.equal(
      undefined,
    );
    const replay = await errorOf(await services.verify('gateway', message, signature));
    expect(replay).to.include({ status: 401, code: 'unauthorized' });
    expect(replay.message).to.match(/challenge has expired/);
  });
});
