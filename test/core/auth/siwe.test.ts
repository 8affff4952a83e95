import { expect } from 'chai';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import type { Hex } from 'viem';
import { parseSiweMessage } from 'viem/siwe';
import { describeEachDatabase, stickyDatabase } from '../../support/kernel.ts';
import {
  AUTH_PREFIX,
  errorOf,
  GATEWAY_PUBLIC,
  newWallet,
  rewriteChallenge,
  RUNTIME_PUBLIC,
  Services,
} from './support.ts';

describeEachDatabase('SIWE sign-in', (database) => {
  let services: Services;
  before(async () => {
    services = await Services.start({ database });
  });
  after(() => services.close());

  /** When the nonce was used (a row is written only then), or null. */
  const usedAt = async (nonce: string) =>
    ((await services.kernel.db('siwe_nonces').where({ nonce }).first()) as { used_at: unknown } | undefined)
      ?.used_at ?? null;

  /** A rejected verify: 401 `unauthorized` whose message matches, and the nonce still unused. */
  const expectRejected = async (res: Response, message: RegExp, nonce: string) => {
    const error = await errorOf(res);
    expect(error.status, error.message).to.equal(401);
    expect(error.code).to.equal('unauthorized');
    expect(error.message).to.match(message);
    expect(await usedAt(nonce)).to.equal(null);
  };

  it('signs in at the gateway: challenge, verify, a 24 h ES256 JWT that opens /api/auth/session', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address.toLowerCase());
    expect(challenge.domain).to.equal('gateway.sigil.test');
    expect(challenge.uri).to.equal(GATEWAY_PUBLIC);
    expect(challenge.chainId).to.equal(8453);
    expect(Date.parse(challenge.expiresAt) - Date.parse(challenge.issuedAt)).to.equal(300_000);
    const fields = parseSiweMessage(challenge.message);
    expect(fields).to.include({ address: wallet.address, nonce: challenge.nonce, uri: GATEWAY_PUBLIC });
    expect(fields.scheme).to.equal('http');
    expect(fields.expirationTime?.toISOString()).to.equal(challenge.expiresAt);
    expect(await usedAt(challenge.nonce)).to.equal(null);

    const signature = await wallet.signMessage({ message: challenge.message });
    const res = await services.verify('gateway', challenge.message, signature);
    expect(res.status).to.equal(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).to.include({ tokenType: 'Bearer', expiresIn: 86_400, address: wallet.address });
    const token = body.token as string;
    const header = decodeProtectedHeader(token);
    expect(header.alg).to.equal('ES256');
    expect(header.kid).to.be.a('string').and.not.equal('');
    const claims = decodeJwt(token);
    expect(claims).to.include({ iss: GATEWAY_PUBLIC, aud: 'sigil:gateway', sub: wallet.address });
    expect(claims.exp! - claims.iat!).to.equal(86_400);
    expect(new Date(claims.exp! * 1000).toISOString()).to.equal(body.expiresAt);
    expect(claims.jti).to.be.a('string');
    expect(await usedAt(challenge.nonce)).to.not.equal(null);

    const session = await services.session('gateway', token);
    expect(session.status).to.equal(200);
    expect(await session.json()).to.deep.equal({ address: wallet.address, method: 'jwt', operator: false });
    expect((await services.get('gateway', '/api/auth/session')).status).to.equal(401);
  });

  it('signs in at the runtime with a 1 h JWT for its own audience', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('runtime', wallet.address);
    expect(challenge.uri).to.equal(RUNTIME_PUBLIC);
    const res = await services.verify(
      'runtime',
      challenge.message,
      await wallet.signMessage({ message: challenge.message }),
    );
    expect(res.status).to.equal(200);
    const { token, expiresIn } = (await res.json()) as { token: string; expiresIn: number };
    expect(expiresIn).to.equal(3600);
    expect(decodeJwt(token)).to.include({ iss: RUNTIME_PUBLIC, aud: 'sigil:runtime' });
    const session = await services.session('runtime', token);
    expect(await session.json()).to.deep.equal({ address: wallet.address, method: 'jwt', operator: false });
    expect(
      (await services.postJson('runtime', `${AUTH_PREFIX.runtime}/create-token`, {}, token)).status,
    ).to.equal(404);
  });

  it('rejects a replayed nonce, and a nonce issued by the other service', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const signature = await wallet.signMessage({ message: challenge.message });
    expect((await services.verify('gateway', challenge.message, signature)).status).to.equal(200);
    const replay = await errorOf(await services.verify('gateway', challenge.message, signature));
    expect(replay).to.include({ status: 401, code: 'unauthorized' });
    expect(replay.message).to.match(/already been used/);

    const forRuntime = await services.challenge('runtime', wallet.address);
    const atGateway = rewriteChallenge(forRuntime, { domain: 'gateway.sigil.test', uri: GATEWAY_PUBLIC });
    await expectRejected(
      await services.verify('gateway', atGateway, await wallet.signMessage({ message: atGateway })),
      /not issued by this service/,
      forRuntime.nonce,
    );
  });

  for (const [what, changes, reason] of [
    ['domain', { domain: 'evil.example' }, /domain "evil.example"/],
    ['chain', { chainId: 1 }, /chain ID 1 is not accepted/],
    ['URI', { uri: 'http://evil.example' }, /URI "http:\/\/evil.example"/],
    ['scheme', { scheme: 'https' }, /scheme "https"/],
  ] as const) {
    it(`rejects a message for the wrong ${what} without burning the nonce`, async () => {
      const wallet = newWallet();
      const challenge = await services.challenge('gateway', wallet.address);
      const forged = rewriteChallenge(challenge, changes);
      await expectRejected(
        await services.verify('gateway', forged, await wallet.signMessage({ message: forged })),
        reason,
        challenge.nonce,
      );
      const signature = await wallet.signMessage({ message: challenge.message });
      expect((await services.verify('gateway', challenge.message, signature)).status).to.equal(200);
    });
  }

  it('rejects an expired challenge (injected clock)', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const signature = await wallet.signMessage({ message: challenge.message });
    services.clock.advance(301_000);
    await expectRejected(
      await services.verify('gateway', challenge.message, signature),
      /expired/,
      challenge.nonce,
    );
  });

  it('rejects a message whose own expiration time has passed, however fresh the nonce', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const stale = rewriteChallenge(challenge, {
      expirationTime: new Date(services.clock.now().getTime() - 60_000),
    });
    await expectRejected(
      await services.verify('gateway', stale, await wallet.signMessage({ message: stale })),
      /expired at/,
      challenge.nonce,
    );
  });

  it('rejects a tampered signature or another wallet, and the nonce still works afterwards', async () => {
    const wallet = newWallet();
    const challenge = await services.challenge('gateway', wallet.address);
    const signature = await wallet.signMessage({ message: challenge.message });
    const flipped =
      `${signature.slice(0, 10)}${signature[10] === 'a' ? 'b' : 'a'}${signature.slice(11)}` as Hex;
    await expectRejected(
      await services.verify('gateway', challenge.message, flipped),
      /Signature was not made by/,
      challenge.nonce,
    );
    const other = await newWallet().signMessage({ message: challenge.message });
    await expectRejected(
      await services.verify('gateway', challenge.message, other),
      /not made by/,
      challenge.nonce,
    );
    expect((await services.verify('gateway', challenge.message, signature)).status).to.equal(200);
  });

  it('rejects a message that is not EIP-4361', async () => {
    const wallet = newWallet();
    const message = 'please let me in';
    const res = await services.verify('gateway', message, await wallet.signMessage({ message }));
    expect(await errorOf(res)).to.include({ status: 401, code: 'unauthorized' });
  });
});

describeEachDatabase('SIWE nonces across restarts', (database) => {
  it('verifies, once, a challenge issued before the kernel restarted', async () => {
    const sticky = stickyDatabase(database);
    try {
      const wallet = newWallet();
      const first = await Services.start({ database: sticky.database });
      const challenge = await first.challenge('gateway', wallet.address);
      await first.close();

      const second = await Services.start({ database: sticky.database });
      try {
        const signature = await wallet.signMessage({ message: challenge.message });
        expect((await second.verify('gateway', challenge.message, signature)).status).to.equal(200);
        expect((await second.verify('gateway', challenge.message, signature)).status).to.equal(401);
      } finally {
        await second.close();
      }
    } finally {
      await sticky.drop();
    }
  });
});

describeEachDatabase('wallet auth across replicas', (database) => {
  it('two replicas on one database share the signing key and consume a nonce exactly once', async () => {
    const sticky = stickyDatabase(database);
    const replicas: Services[] = [];
    try {
      replicas.push(await Services.start({ database: sticky.database }));
      replicas.push(await Services.start({ database: sticky.database }));
      const [a, b] = replicas as [Services, Services];
      const wallet = newWallet();
      // Both generate a key on first use at the same moment; insert-if-absent leaves one.
      const [fromA, fromB] = await Promise.all([a.signIn('gateway', wallet), b.signIn('gateway', wallet)]);
      expect((await b.session('gateway', fromA)).status).to.equal(200);
      expect((await a.session('gateway', fromB)).status).to.equal(200);
      expect(await a.kernel.db('signing_keys').select('purpose')).to.have.length(1);

      const challenge = await a.challenge('gateway', wallet.address);
      const signature = await wallet.signMessage({ message: challenge.message });
      const statuses = await Promise.all(
        [a, b, a, b].map(
          async (replica) => (await replica.verify('gateway', challenge.message, signature)).status,
        ),
      );
      expect(statuses.sort()).to.deep.equal([200, 401, 401, 401]);
    } finally {
      for (const replica of replicas) await replica.close();
      await sticky.drop();
    }
  });
});
