import { createPrivateKey, createPublicKey, generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import { expect } from 'chai';
import { decodeJwt, decodeProtectedHeader, jwtVerify, SignJWT } from 'jose';
import { SigilError } from '@sigil/plugin-api';
import { describeEachDatabase } from '../../support/kernel.ts';
import { stickyDatabase } from '../../support/kernel.ts';
import { errorOf, GATEWAY_PUBLIC, newWallet, Services } from './support.ts';

describeEachDatabase('session JWTs', (database) => {
  let services: Services;
  before(async () => {
    services = await Services.start({ database });
  });
  after(() => services.close());

  const expectRefused = async (res: Response, reason: RegExp) => {
    const error = await errorOf(res);
    expect(error).to.include({ status: 401, code: 'unauthorized' });
    expect(error.message).to.match(reason);
  };

  /** Valid gateway claims for a fresh wallet, for forging tokens around them. */
  const claimsFor = () => {
    const now = Math.floor(services.clock.now().getTime() / 1000);
    return {
      iss: GATEWAY_PUBLIC,
      aud: 'sigil:gateway',
      sub: newWallet().address,
      iat: now,
      exp: now + 600,
      jti: 'forged',
    };
  };
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

  it('expires with the injected clock, allowing the configured skew', async () => {
    const jwt = await services.signIn('gateway', newWallet());
    services.clock.advance((86_400 + 20) * 1000);
    expect((await services.session('gateway', jwt)).status).to.equal(200);
    services.clock.advance(11_000);
    await expectRefused(await services.session('gateway', jwt), /"exp"/);
  });

  it('refuses alg "none"', async () => {
    const jwt = await services.signIn('gateway', newWallet());
    const { kid } = decodeProtectedHeader(jwt);
    const unsigned = `${b64({ alg: 'none', typ: 'JWT', kid })}.${b64(claimsFor())}.`;
    await expectRefused(await services.session('gateway', unsigned), /Session token rejected/);
  });

  it('refuses HS256 signed with the public key', async () => {
    const jwt = await services.signIn('gateway', newWallet());
    const { kid } = decodeProtectedHeader(jwt);
    const row = await services.kernel.db('signing_keys').where({ purpose: 'session-jwt' }).first();
    const jwk = JSON.parse(row.private_jwk) as JsonWebKey;
    const publicKey = createPublicKey(createPrivateKey({ key: jwk, format: 'jwk' }));
    for (const secret of [
      publicKey.export({ format: 'pem', type: 'spki' }) as string,
      JSON.stringify(publicKey.export({ format: 'jwk' })),
    ]) {
      const forged = await new SignJWT(claimsFor())
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT', ...(kid === undefined ? {} : { kid }) })
        .sign(new TextEncoder().encode(secret));
      await expectRefused(await services.session('gateway', forged), /Session token rejected/);
    }
  });

  it('refuses an "iat" later than the clock skew allows, signed with the real session key', async () => {
    const jwt = await services.signIn('gateway', newWallet());
    const { kid } = decodeProtectedHeader(jwt);
    const row = await services.kernel.db('signing_keys').where({ purpose: 'session-jwt' }).first();
    const key = createPrivateKey({ key: JSON.parse(row.private_jwk) as JsonWebKey, format: 'jwk' });
    const sign = (claims: Record<string, unknown>) =>
      new SignJWT({ ...claimsFor(), ...claims })
        .setProtectedHeader({ alg: 'ES256', typ: 'JWT', kid: kid! })
        .sign(key);
    const now = Math.floor(services.clock.now().getTime() / 1000);
    // Issued an hour from now: a token from the future is refused, whatever its exp.
    await expectRefused(
      await services.session('gateway', await sign({ iat: now + 3600, exp: now + 4200 })),
      /"iat"/,
    );
    // Within the 30 s skew a clock slightly ahead is fine, and one second past it is not.
    expect((await services.session('gateway', await sign({ iat: now + 30 }))).status).to.equal(200);
    await expectRefused(await services.session('gateway', await sign({ iat: now + 31 })), /"iat"/);
  });

  it("refuses the other service's JWT in each direction", async () => {
    const wallet = newWallet();
    const atRuntime = await services.signIn('runtime', wallet);
    const atGateway = await services.signIn('gateway', wallet);
    await expectRefused(await services.session('gateway', atRuntime), /"aud"|"iss"/);
    await expectRefused(await services.session('runtime', atGateway), /"aud"|"iss"/);
    expect((await services.session('gateway', atGateway)).status).to.equal(200);
  });

  it('refuses a bad signature, a token from another key, and garbage', async () => {
    const jwt = await services.signIn('gateway', newWallet());
    const [header, payload, signature] = jwt.split('.') as [string, string, string];
    const flipped = `${signature.startsWith('A') ? 'B' : 'A'}${signature.slice(1)}`;
    await expectRefused(await services.session('gateway', `${header}.${payload}.${flipped}`), /signature/);

    const stranger = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    const foreign = await new SignJWT(claimsFor())
      .setProtectedHeader({ alg: 'ES256', kid: decodeProtectedHeader(jwt).kid! })
      .sign(stranger);
    await expectRefused(await services.session('gateway', foreign), /signature/);

    for (const garbage of ['x', 'a.b.c', `${header}.${b64({ sub: 'not-an-address' })}.${signature}`]) {
      await expectRefused(await services.session('gateway', garbage), /Session token rejected/);
    }
  });

  it('signs both services with one key, kept in the database', async () => {
    const wallet = newWallet();
    const kids = [
      decodeProtectedHeader(await services.signIn('gateway', wallet)).kid,
      decodeProtectedHeader(await services.signIn('runtime', wallet)).kid,
    ];
    expect(kids[0]).to.equal(kids[1]);
    const rows = await services.kernel.db('signing_keys').select('purpose', 'kid');
    expect(rows).to.deep.equal([{ purpose: 'session-jwt', kid: kids[0] }]);
  });
});

describeEachDatabase('session JWT keys', (database) => {
  it('accepts after a restart a JWT issued before it', async () => {
    const sticky = stickyDatabase(database);
    try {
      const wallet = newWallet();
      const first = await Services.start({ database: sticky.database });
      const jwt = await first.signIn('gateway', wallet);
      await first.close();
      const second = await Services.start({ database: sticky.database });
      try {
        expect((await second.session('gateway', jwt)).status).to.equal(200);
      } finally {
        await second.close();
      }
    } finally {
      await sticky.drop();
    }
  });

  it('signs with a configured PKCS#8 key and stores none', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }) as string;
    const services = await Services.start({ database, config: { auth: { jwtSigningKey: pem } } });
    try {
      const wallet = newWallet();
      const jwt = await services.signIn('gateway', wallet);
      const { payload } = await jwtVerify(jwt, publicKey, {
        audience: 'sigil:gateway',
        currentDate: services.clock.now(),
      });
      expect(payload.sub).to.equal(wallet.address);
      expect(decodeJwt(jwt).iss).to.equal(GATEWAY_PUBLIC);
      const [{ n }] = (await services.kernel.db('signing_keys').count({ n: '*' })) as [
        { n: number | string },
      ];
      expect(Number(n)).to.equal(0);
    } finally {
      await services.close();
    }
  });

  it('refuses at start-up a configured key that is not an ES256 private key', async () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({
      format: 'pem',
      type: 'pkcs8',
    }) as string;
    for (const jwtSigningKey of ['not a key', rsa]) {
      let failure: unknown;
      try {
        await (await Services.start({ database, config: { auth: { jwtSigningKey } } })).close();
      } catch (err) {
        failure = err;
      }
      expect(failure).to.be.instanceOf(SigilError);
      expect((failure as SigilError).code).to.equal('config_invalid');
      expect((failure as SigilError).message).to.not.include('PRIVATE KEY');
    }
  });
});
