import { expect } from 'chai';
import { describeEachDatabase } from '../support/kernel.ts';
import { AUTH_PREFIX, newWallet, Services } from './support.ts';

const TTL_SECONDS = 300;

/**
 * The attack of issue 21 (Low): anyone may ask for a SIWE challenge, and each one was a database row,
 * with no bound on how many a client could have at once. Now a client has at most
 * `auth.challengeMaxPerClient` live challenges per service, the service at most
 * `auth.challengeMaxOutstanding`; past either it is a 429 that records nothing, and expired rows go.
 */
describeEachDatabase('SIWE challenges are bounded and expire', (database) => {
  let services: Services;
  afterEach(() => services?.close());

  const ask = (service: 'gateway' | 'runtime' = 'gateway') =>
    services.get(service, `${AUTH_PREFIX[service]}/challenge?address=${newWallet().address}`);
  const errorOf = async (res: Response) => ({
    status: res.status,
    ...((await res.json()) as { code: string; details: Record<string, unknown> }),
  });
  const rows = async (service = 'gateway') =>
    Number(
      (
        (await services.kernel.db('siwe_nonces').where({ service }).count({ n: '*' })) as [
          { n: number | string },
        ]
      )[0].n,
    );

  it('a client past its limit gets a 429 with Retry-After, and no row; it may ask again once they expire', async () => {
    services = await Services.start({ database, config: { auth: { challengeMaxPerClient: 3 } as never } });
    for (let i = 0; i < 3; i++) expect((await ask()).status).to.equal(200);
    services.clock.advance(100_000);
    const refused = await ask();
    const error = await errorOf(refused);
    expect(error).to.include({ status: 429, code: 'rate_limited' });
    expect(error.details).to.deep.include({ reason: 'too_many_challenges', scope: 'client', limit: 3 });
    // The oldest challenge expires 200 s from now: then one more may be asked.
    expect(refused.headers.get('retry-after')).to.equal('200');
    expect(await rows()).to.equal(3);
    // The other service keeps its own count.
    expect((await ask('runtime')).status).to.equal(200);

    services.clock.advance(200_000);
    expect((await ask()).status).to.equal(200);
    // The expired ones were swept when it was issued.
    expect(await rows()).to.equal(1);
  });

  it('with the defaults, one client gets 100 live challenges and the 101st is refused', async () => {
    services = await Services.start({ database });
    for (let i = 0; i < 100; i++) expect((await ask()).status).to.equal(200);
    expect((await ask()).status).to.equal(429);
    expect(await rows()).to.equal(100);
  });

  it('the service past its outstanding limit gets a 429 for everyone, and sweeps expired rows', async () => {
    services = await Services.start({
      database,
      config: { auth: { challengeMaxPerClient: 100, challengeMaxOutstanding: 2 } as never },
    });
    expect((await ask()).status).to.equal(200);
    expect((await ask()).status).to.equal(200);
    const error = await errorOf(await ask());
    expect(error).to.include({ status: 429, code: 'rate_limited' });
    expect(error.details).to.deep.include({ reason: 'too_many_challenges', scope: 'service', limit: 2 });
    expect(await rows()).to.equal(2);
    services.clock.advance(TTL_SECONDS * 1000);
    expect((await ask()).status).to.equal(200);
    expect(await rows()).to.equal(1);
  });
});
