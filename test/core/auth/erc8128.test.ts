import { expect } from 'chai';
import { describeEachDatabase, type TestDatabase } from '../../support/kernel.ts';
import { bearerHeader, errorOf, newWallet, RUNTIME_PUBLIC, Services } from './support.ts';

const SESSION = '/api/auth/session';
const CREATE_TOKEN = '/api/auth/create-token';
const json = (body: unknown): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
});

describeEachDatabase('ERC-8128 request signatures', (database) => {
  let services: Services;
  before(async () => {
    services = await Services.start({ database });
  });
  after(() => services.close());

  const count = async (table: string) => {
    const [row] = (await services.kernel.db(table).count({ n: '*' })) as [{ n: number | string }];
    return Number(row.n);
  };
  const expectRefused = async (res: Response, reason: RegExp) => {
    const error = await errorOf(res);
    expect(error, error.message).to.include({ status: 401, code: 'unauthorized' });
    expect(error.message).to.match(reason);
  };

  it('authenticates a signed GET as its signer', async () => {
    const wallet = newWallet();
    const { response } = await services.signed('gateway', wallet, SESSION);
    expect(response.status).to.equal(200);
    expect(await response.json()).to.deep.equal({
      address: wallet.address,
      method: 'erc8128',
      operator: false,
    });
  });

  it('authenticates signed bodies: JSON, non-JSON, and a bodiless DELETE', async () => {
    const wallet = newWallet();
    const created = await services.signed('gateway', wallet, CREATE_TOKEN, json({ label: 'signed' }));
    expect(created.response.status).to.equal(201);
    expect(created.request.headers.get('signature-input')).to.include('"content-digest"');
    const { id } = (await created.response.json()) as { id: string };

    const text = await services.signed('gateway', wallet, CREATE_TOKEN, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'not json at all',
    });
    expect(text.response.status).to.equal(201);

    const revoked = await services.signed('gateway', wallet, `/api/auth/tokens/${id}`, { method: 'DELETE' });
    expect(revoked.response.status).to.equal(204);

    const runtime = await services.signed('runtime', wallet, '/auth/session?verbose=1');
    expect(runtime.request.headers.get('signature-input')).to.include('"@query"');
    expect(runtime.response.status).to.equal(200);
  });

  it('refuses a replayed nonce, storing it once', async () => {
    const wallet = newWallet();
    const before = await count('request_nonces');
    const { response, request } = await services.signed('gateway', wallet, SESSION);
    expect(response.status).to.equal(200);
    await expectRefused(await services.replay('gateway', SESSION, request), /nonce has already been used/);
    expect(await count('request_nonces')).to.equal(before + 1);
  });

  it('refuses a signature over a different body, and creates nothing', async () => {
    const wallet = newWallet();
    const before = await count('wallet_tokens');
    for (const [type, signedBody, sentBody] of [
      ['application/json', '{"label":"a"}', '{"label":"b"}'],
      ['text/plain', 'original', 'tampered'],
    ] as const) {
      const { response } = await services.signed(
        'gateway',
        wallet,
        CREATE_TOKEN,
        { method: 'POST', headers: { 'content-type': type }, body: signedBody },
        { send: { body: sentBody } },
      );
      await expectRefused(response, /body does not match Content-Digest/);
    }
    const unsignedBody = await services.signed(
      'gateway',
      wallet,
      CREATE_TOKEN,
      { method: 'POST' },
      {
        send: { body: '{}', headers: { 'content-type': 'application/json' } },
      },
    );
    await expectRefused(unsignedBody.response, /must cover/);
    expect(await count('wallet_tokens')).to.equal(before);
  });

  it('refuses expired (injected clock), over-long, future and wrong-host signatures', async () => {
    const wallet = newWallet();
    const now = () => Math.floor(services.clock.now().getTime() / 1000);
    const expiring = await services.sign('gateway', wallet, SESSION, {}, { ttlSeconds: 60 });
    services.clock.advance((60 + 31) * 1000);
    await expectRefused(await services.replay('gateway', SESSION, expiring), /expired/);
    const long = await services.signed('gateway', wallet, SESSION, {}, { ttlSeconds: 301 });
    await expectRefused(long.response, /validity window/);
    const future = await services.signed('gateway', wallet, SESSION, {}, { created: now() + 120 });
    await expectRefused(future.response, /not valid yet/);
    const elsewhere = await services.signed('gateway', wallet, SESSION, {}, { signFor: RUNTIME_PUBLIC });
    await expectRefused(elsewhere.response, /does not match the signer/);
    const otherChain = await services.signed('gateway', wallet, SESSION, {}, { chainId: 1 });
    await expectRefused(otherChain.response, /chain 1 is not accepted/);
    const withinSkew = await services.signed(
      'gateway',
      wallet,
      SESSION,
      {},
      { created: now() - 85, ttlSeconds: 60 },
    );
    expect(withinSkew.response.status).to.equal(200);
  });

  it('lets the signature decide when a bearer token comes with it', async () => {
    const a = newWallet();
    const b = newWallet();
    const bearerA = await services.signIn('gateway', a);
    const both = await services.signed('gateway', b, SESSION, { headers: bearerHeader(bearerA) });
    expect(await both.response.json()).to.include({ address: b.address, method: 'erc8128' });

    const bad = await services.signed(
      'gateway',
      b,
      SESSION,
      {},
      {
        send: { headers: { ...bearerHeader(bearerA), signature: 'eth=:AAAA:' } },
      },
    );
    await expectRefused(bad.response, /ERC-8128 signature rejected/);
    expect((await services.session('gateway', bearerA)).status).to.equal(200);
  });

  it('refuses malformed signature headers with 401', async () => {
    const malformed: Record<string, string>[] = [
      { 'signature-input': 'garbage', signature: 'garbage' },
      { signature: 'eth=:AAAA:' },
      { 'signature-input': 'eth=("@authority");created=1;expires=2;keyid="nope"', signature: 'eth=:AAAA:' },
    ];
    for (const headers of malformed) {
      await expectRefused(
        await services.fetch('gateway', SESSION, { headers }),
        /ERC-8128 signature rejected/,
      );
    }
  });
});

describeEachDatabase('operator wallets and ERC-8128 enforcement', (database: TestDatabase) => {
  const operator = newWallet();
  const member = newWallet();

  for (const enforce of [true, false]) {
    describe(enforce ? 'enforced' : 'not enforced', () => {
      let services: Services;
      before(async () => {
        services = await Services.start({
          database,
          config: {
            gateway: {
              operatorWallets: [operator.address.toLowerCase()],
              erc8128EnforceOperatorMcp: enforce,
            },
          },
        });
      });
      after(() => services.close());

      it(`bearer-only requests from an operator are ${enforce ? 'refused' : 'accepted'}`, async () => {
        const jwt = await services.signIn('gateway', operator);
        const res = await services.session('gateway', jwt);
        if (enforce) {
          const error = await errorOf(res);
          expect(error).to.include({ status: 401, code: 'unauthorized' });
          expect(error.message).to.match(/Operator wallets must sign requests with ERC-8128/);
        } else {
          expect(await res.json()).to.deep.equal({
            address: operator.address,
            method: 'jwt',
            operator: true,
          });
        }
      });

      it('signed requests from an operator are accepted, and other wallets keep bearer tokens', async () => {
        const signed = await services.signed('gateway', operator, SESSION);
        expect(await signed.response.json()).to.deep.equal({
          address: operator.address,
          method: 'erc8128',
          operator: true,
        });
        const { response } = await services.signed('gateway', operator, CREATE_TOKEN, json({}));
        const { token } = (await response.json()) as { token: string };
        expect((await services.session('gateway', token)).status).to.equal(enforce ? 401 : 200);
        const memberJwt = await services.signIn('gateway', member);
        expect(await (await services.session('gateway', memberJwt)).json()).to.include({ operator: false });
      });
    });
  }
});
