import { createHash } from 'node:crypto';
import { expect } from 'chai';
import { WALLET_TOKEN_PREFIX } from '../../../core/auth/index.ts';
import { WalletTokens } from '../../../core/auth/wallet-tokens.ts';
import { describeEachDatabase } from '../../support/kernel.ts';
import { bearerHeader, errorOf, newWallet, Services } from './support.ts';

async function expectRefused(tokens: WalletTokens, token: string): Promise<void> {
  const refused = await tokens.authenticate(token).catch((err: Error) => err);
  expect(refused).to.be.instanceOf(Error);
  expect((refused as Error).message).to.match(/revoked/);
}

describeEachDatabase('wallet tokens', (database) => {
  let services: Services;
  before(async () => {
    services = await Services.start({ database });
  });
  after(() => services.close());

  const tokenRow = (id: string) => services.kernel.db('wallet_tokens').where({ id }).first();
  const revoke = (id: string, bearer: string) =>
    services.fetch('gateway', `/api/auth/tokens/${id}`, { method: 'DELETE', headers: bearerHeader(bearer) });
  const list = async (bearer: string) => {
    const res = await services.get('gateway', '/api/auth/tokens', bearer);
    expect(res.status).to.equal(200);
    return ((await res.json()) as { tokens: Record<string, unknown>[] }).tokens;
  };

  it('SIWE, then create-token: the JWT and the wallet token both reach the session', async () => {
    const wallet = newWallet();
    const jwt = await services.signIn('gateway', wallet);
    const res = await services.postJson('gateway', '/api/auth/create-token', { label: ' laptop ' }, jwt);
    expect(res.status).to.equal(201);
    const created = (await res.json()) as Record<string, string>;
    expect(created).to.include({ address: wallet.address, label: 'laptop', prefix: WALLET_TOKEN_PREFIX });
    expect(WALLET_TOKEN_PREFIX).to.equal('sigil_wt_');
    expect(created.token).to.match(/^sigil_wt_[A-Za-z0-9_-]{43}$/);
    expect(created.createdAt).to.equal(services.clock.now().toISOString());

    const row = await tokenRow(created.id!);
    expect(row.token_hash).to.equal(createHash('sha256').update(created.token!).digest('hex'));
    expect(row.wallet).to.equal(wallet.address);
    expect(JSON.stringify(row)).to.not.include(created.token!.slice(WALLET_TOKEN_PREFIX.length));

    for (const [bearer, method] of [
      [jwt, 'jwt'],
      [created.token!, 'wallet-token'],
    ] as const) {
      const session = await services.session('gateway', bearer);
      expect(session.status).to.equal(200);
      expect(await session.json()).to.deep.equal({ address: wallet.address, method, operator: false });
    }
  });

  it("lists the caller's tokens without secrets, with last use", async () => {
    const wallet = newWallet();
    const jwt = await services.signIn('gateway', wallet);
    const first = await services.createWalletToken(jwt, 'ci');
    services.clock.advance(1000);
    await services.createWalletToken(jwt);
    await services.createWalletToken(await services.signIn('gateway', newWallet()));
    await services.session('gateway', first.token);

    const tokens = await list(jwt);
    expect(tokens).to.have.length(2);
    for (const token of tokens) {
      expect(token).to.have.all.keys('id', 'label', 'createdAt', 'lastUsedAt', 'revokedAt');
    }
    const listedFirst = tokens.find((t) => t.id === first.id)!;
    expect(listedFirst).to.include({
      label: 'ci',
      revokedAt: null,
      lastUsedAt: services.clock.now().toISOString(),
    });
    expect(tokens[0]!.label).to.equal(null);
  });

  it('revokes: 204, then the token is refused and listed as revoked', async () => {
    const jwt = await services.signIn('gateway', newWallet());
    const { token, id } = await services.createWalletToken(jwt);
    // Used first, so this process holds it as live: the revocation must still apply at once.
    expect((await services.session('gateway', token)).status).to.equal(200);
    expect((await revoke(id, jwt)).status).to.equal(204);
    const refused = await errorOf(await services.session('gateway', token));
    expect(refused).to.include({ status: 401, code: 'unauthorized' });
    expect(refused.message).to.match(/revoked/);
    expect((await list(jwt))[0]!.revokedAt).to.equal(services.clock.now().toISOString());
    expect((await revoke(id, jwt)).status).to.equal(204);
  });

  it('a revocation on another replica applies here within the cache TTL', async () => {
    const wallet = newWallet();
    const { token } = await services.createWalletToken(await services.signIn('gateway', wallet));
    const ttl = 300;
    const here = new WalletTokens(services.kernel.db, services.clock, { cacheTtlMs: ttl });
    const other = new WalletTokens(services.kernel.db, services.clock, { cacheTtlMs: ttl });
    expect(await here.authenticate(token)).to.equal(wallet.address);
    const [info] = await other.list(wallet.address);
    await other.revoke(wallet.address, info!.id);
    await expectRefused(other, token);
    const revoked = performance.now();
    for (;;) {
      const outcome = await here.authenticate(token).catch((err: Error) => err);
      if (outcome instanceof Error) break;
      expect(performance.now() - revoked).to.be.below(ttl + 200);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await expectRefused(here, token);
  });

  it('another wallet cannot revoke your token: 404, and nothing changes', async () => {
    const owner = await services.signIn('gateway', newWallet());
    const { token, id } = await services.createWalletToken(owner);
    const intruder = await services.signIn('gateway', newWallet());
    expect(await errorOf(await revoke(id, intruder))).to.include({ status: 404, code: 'not_found' });
    expect((await tokenRow(id)).revoked_at).to.equal(null);
    expect((await services.session('gateway', token)).status).to.equal(200);
    expect((await revoke('6f1c2a64-8a43-4a55-9d3a-1f0f7f0f7f0f', owner)).status).to.equal(404);
  });

  it('a wallet token cannot manage wallet tokens, and the runtime does not accept one', async () => {
    const jwt = await services.signIn('gateway', newWallet());
    const { token, id } = await services.createWalletToken(jwt);
    const minted = await services.postJson('gateway', '/api/auth/create-token', {}, token);
    expect(await errorOf(minted)).to.include({ status: 403, code: 'forbidden' });
    expect((await services.get('gateway', '/api/auth/tokens', token)).status).to.equal(403);
    expect((await revoke(id, token)).status).to.equal(403);
    const count = await services.kernel
      .db('wallet_tokens')
      .where({ wallet: (await tokenRow(id)).wallet })
      .count({ n: '*' });
    expect(Number((count[0] as { n: number | string }).n)).to.equal(1);

    const atRuntime = await errorOf(await services.session('runtime', token));
    expect(atRuntime).to.include({ status: 401, code: 'unauthorized' });
    expect(atRuntime.message).to.match(/not accepted by the runtime/);
  });

  it('refuses unknown and malformed wallet tokens, and unauthenticated management', async () => {
    for (const bearer of [`sigil_wt_${'A'.repeat(43)}`, 'sigil_wt_short']) {
      expect(await errorOf(await services.session('gateway', bearer))).to.include({ status: 401 });
    }
    expect((await services.postJson('gateway', '/api/auth/create-token', {})).status).to.equal(401);
    expect((await services.get('gateway', '/api/auth/tokens')).status).to.equal(401);
  });
});
