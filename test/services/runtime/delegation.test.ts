import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { expect } from 'chai';
import { calculateJwkThumbprint, decodeJwt, decodeProtectedHeader, SignJWT } from 'jose';
import { DelegationKeys, DELEGATED_JWT_TYPE } from '../../../core/auth/delegation/keys.ts';
import { jwksSha256 } from '../../../core/auth/delegation/report-data.ts';
import { createRuntimeApp } from '../../../services/runtime/app.ts';
import { serve } from '../../../services/serve.ts';
import { describeEachDatabase, openTestKernel } from '../../support/kernel.ts';
import { errorOf, newWallet } from '../../core/auth/support.ts';
import { captureLogs } from '../../support/logs.ts';
import { GATEWAY_PUBLIC, gatewaySession, mintDelegatedToken, RUNTIME_PUBLIC, Stack } from './support.ts';

const pem = (key: KeyObject): string => key.export({ format: 'pem', type: 'pkcs8' }) as string;
const newKey = () => generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;

async function expectRefused(stack: Stack, token: string, reason: RegExp): Promise<void> {
  const error = await errorOf(await stack.get('gateway', '/api/auth/session', token));
  expect(error).to.include({ status: 401, code: 'unauthorized' });
  expect(error.message).to.match(reason);
}

describeEachDatabase('delegated gateway access', (database) => {
  describe('keys, tokens and refusals', () => {
    const current = newKey();
    let stack: Stack;
    let logs: ReturnType<typeof captureLogs>;
    before(async () => {
      logs = captureLogs();
      stack = await Stack.start({
        database,
        logs: logs.stream,
        config: { runtime: { mcpSigningKey: pem(current) } },
      });
    });
    after(() => stack?.close());

    /** Signs like the runtime, but with whatever key, header and claims a test needs. */
    const forge = async (
      overrides: { claims?: Record<string, unknown>; header?: Record<string, unknown>; key?: KeyObject } = {},
    ) => {
      const now = Math.floor(stack.clock.now().getTime() / 1000);
      const kid = await calculateJwkThumbprint(createPublicKey(current).export({ format: 'jwk' }));
      return new SignJWT({
        iss: RUNTIME_PUBLIC,
        aud: GATEWAY_PUBLIC,
        sub: newWallet().address,
        iat: now,
        exp: now + 300,
        jti: 'forged',
        ...overrides.claims,
      })
        .setProtectedHeader({ alg: 'ES256', typ: DELEGATED_JWT_TYPE, kid, ...overrides.header } as never)
        .sign(overrides.key ?? current);
    };

    it('publishes its ES256 public key with a kid (the RFC 7638 thumbprint), never the private part', async () => {
      const res = await stack.get('runtime', '/.well-known/jwks.json');
      expect(res.status).to.equal(200);
      const jwks = (await res.json()) as { keys: Record<string, string>[] };
      expect(jwks.keys).to.have.length(1);
      const [key] = jwks.keys as [Record<string, string>];
      expect(key).to.include({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
      expect(key).to.not.have.property('d');
      const jwk = createPublicKey(current).export({ format: 'jwk' });
      expect(key).to.include({ x: jwk.x, y: jwk.y, kid: await calculateJwkThumbprint(jwk) });
    });

    it('mints per-wallet ES256 JWTs: the wallet as subject, the gateway as audience, 5 minutes, a kid', async () => {
      const wallet = newWallet();
      const jwt = await stack.signIn(wallet);
      const res = await stack.send('runtime', 'POST', '/wallet/gateway-token', undefined, jwt);
      const body = (await res.json()) as Record<string, unknown>;
      expect(body).to.include({
        tokenType: 'Bearer',
        audience: GATEWAY_PUBLIC,
        expiresIn: 300,
        address: wallet.address,
      });
      const token = body.token as string;
      const header = decodeProtectedHeader(token);
      expect(header).to.include({ alg: 'ES256', typ: DELEGATED_JWT_TYPE, kid: body.kid });
      const claims = decodeJwt(token);
      expect(claims).to.include({ sub: wallet.address, aud: GATEWAY_PUBLIC, iss: RUNTIME_PUBLIC });
      expect((claims.exp as number) - (claims.iat as number)).to.equal(300);
      expect((await stack.send('runtime', 'POST', '/wallet/gateway-token', undefined)).status).to.equal(401);
    });

    it('is wallet auth at the gateway, with the trust state in the session, a header and the log', async () => {
      const wallet = newWallet();
      const token = await stack.gatewayToken(await stack.signIn(wallet));
      const session = await gatewaySession(stack, token);
      expect(session.status).to.equal(200);
      expect(session.body).to.include({
        address: wallet.address,
        method: 'delegated-jwt',
        operator: false,
        trust: 'degraded_no_attestation',
        trustPlatform: 'none',
      });
      expect(session.trustHeader).to.equal('degraded_no_attestation');
      const jwks = await (await stack.get('runtime', '/.well-known/jwks.json')).json();
      expect(session.body.runtimeJwksSha256).to.equal(jwksSha256(jwks).toString('hex'));
      const lines = logs
        .text()
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(
        lines.some((line) => line.msg === 'runtime trust state' && line.trust === 'degraded_no_attestation'),
      ).to.equal(true);
      expect(
        lines.some(
          (line) =>
            line.msg === 'request' &&
            line.path === '/api/auth/session' &&
            line.runtimeTrust === 'degraded_no_attestation',
        ),
      ).to.equal(true);
    });

    it('refuses an expired token, allowing the configured skew', async () => {
      const token = await stack.gatewayToken(await stack.signIn(newWallet()));
      stack.clock.advance((300 + 20) * 1000);
      expect((await gatewaySession(stack, token)).status).to.equal(200);
      stack.clock.advance(11_000);
      await expectRefused(stack, token, /"exp"/);
    });

    it('refuses a token for another audience, and one another issuer claims', async () => {
      const other = new DelegationKeys({
        current: pem(current),
        previous: undefined,
        clock: stack.clock,
        issuer: RUNTIME_PUBLIC,
        ttlSeconds: 300,
      });
      const wallet = newWallet().address;
      await expectRefused(
        stack,
        (await other.sign(wallet, 'http://other-gateway.sigil.test')).token,
        /"aud"/,
      );
      await expectRefused(stack, await forge({ claims: { aud: 'sigil:gateway' } }), /"aud"/);
      // Not the runtime's issuer: not a delegated token at all, and no session key of the gateway signed it.
      await expectRefused(
        stack,
        await forge({ claims: { iss: 'http://evil.sigil.test' } }),
        /Session token rejected/,
      );
    });

    it('refuses forged tokens: another key under the runtime kid, altered claims, an over-long lifetime', async () => {
      await expectRefused(stack, await forge({ key: newKey() }), /signature verification failed/);
      const genuine = await stack.gatewayToken(await stack.signIn(newWallet()));
      const [header, payload, signature] = genuine.split('.') as [string, string, string];
      const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as Record<string, unknown>;
      const altered = Buffer.from(JSON.stringify({ ...claims, sub: newWallet().address })).toString(
        'base64url',
      );
      await expectRefused(stack, `${header}.${altered}.${signature}`, /signature verification failed/);
      const now = Math.floor(stack.clock.now().getTime() / 1000);
      await expectRefused(stack, await forge({ claims: { exp: now + 3600 } }), /at most 900 s/);
      // A future iat cannot carry the 900 s cap forward: iat is refused past the skew, and exp is
      // capped from the gateway's clock (now + 900 s + skew), not from the token's iat.
      await expectRefused(stack, await forge({ claims: { iat: now + 3600, exp: now + 4500 } }), /"iat"/);
      await expectRefused(stack, await forge({ claims: { iat: now + 31, exp: now + 931 } }), /"iat"/);
      await expectRefused(stack, await forge({ claims: { iat: now + 30, exp: now + 931 } }), /at most 900 s/);
      expect(
        (await gatewaySession(stack, await forge({ claims: { iat: now + 30, exp: now + 930 } }))).status,
      ).to.equal(200);
      await expectRefused(
        stack,
        await forge({ header: { typ: 'JWT' }, claims: {} }),
        /Session token rejected/,
      );
      await expectRefused(stack, await forge({ claims: { sub: 'not-a-wallet' } }), /"sub"/);
    });

    it('refuses algorithm confusion: HS256 keyed with the public key, alg none, RS256', async () => {
      const kid = await calculateJwkThumbprint(createPublicKey(current).export({ format: 'jwk' }));
      const now = Math.floor(stack.clock.now().getTime() / 1000);
      const claims = {
        iss: RUNTIME_PUBLIC,
        aud: GATEWAY_PUBLIC,
        sub: newWallet().address,
        iat: now,
        exp: now + 300,
        jti: 'x',
      };
      const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
      const publicKey = createPublicKey(current);
      const jwks = await (await stack.get('runtime', '/.well-known/jwks.json')).text();
      for (const secret of [
        publicKey.export({ format: 'pem', type: 'spki' }) as string,
        JSON.stringify(publicKey.export({ format: 'jwk' })),
        jwks,
      ]) {
        const hs256 = await new SignJWT(claims)
          .setProtectedHeader({ alg: 'HS256', typ: DELEGATED_JWT_TYPE, kid })
          .sign(new TextEncoder().encode(secret));
        await expectRefused(stack, hs256, /"alg"/);
      }
      await expectRefused(
        stack,
        `${b64({ alg: 'none', typ: DELEGATED_JWT_TYPE, kid })}.${b64(claims)}.`,
        /Delegated token rejected/,
      );
      const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
      const rs256 = await new SignJWT(claims)
        .setProtectedHeader({ alg: 'RS256', typ: DELEGATED_JWT_TYPE, kid })
        .sign(rsa);
      await expectRefused(stack, rs256, /"alg"/);
    });

    it('reaches /mcp with the official SDK client, through the runtime’s delegated transport', async () => {
      const wallet = newWallet();
      const seen: (string | null)[] = [];
      const client = new Client({ name: 'sigil-test', version: '1.0.0' });
      const transport = await stack.runtime.gateway.delegatedTransport(wallet.address);
      await client.connect(transport);
      const tools = await client.listTools();
      expect(tools.tools.map((tool) => tool.name)).to.include('gateway_list_enabled');
      await client.callTool({ name: 'gateway_list_enabled', arguments: {} });
      await client.close();
      // The bare SDK transport with a minted token as its bearer, seeing the trust header on every answer.
      const token = await stack.gatewayToken(await stack.signIn(wallet));
      const direct = new Client({ name: 'sigil-test', version: '1.0.0' });
      await direct.connect(
        new StreamableHTTPClientTransport(new URL(stack.url('gateway', '/mcp')), {
          requestInit: { headers: { authorization: `Bearer ${token}` } },
          fetch: async (url, init) => {
            const res = await fetch(url, init);
            seen.push(res.headers.get('x-sigil-runtime-trust'));
            return res;
          },
        }),
      );
      await direct.listTools();
      await direct.close();
      expect(seen.length).to.be.greaterThan(1);
      expect(seen.filter((state) => state !== null)).to.not.be.empty;
      // A refused token ends the SDK's handshake with the 401.
      const refused = new Client({ name: 'sigil-test', version: '1.0.0' });
      let failure: unknown;
      await refused
        .connect(
          new StreamableHTTPClientTransport(new URL(stack.url('gateway', '/mcp')), {
            requestInit: { headers: { authorization: `Bearer ${await forge({ key: newKey() })}` } },
          }),
        )
        .catch((err: unknown) => (failure = err));
      expect(String(failure)).to.match(/401|Delegated token rejected/);
    });
  });

  describe('one process (sigil up)', () => {
    for (const services of [
      ['runtime', 'gateway'],
      ['gateway', 'runtime'],
    ] as const)
      it(`reads the runtime it serves directly: no runtime URL to configure, even on ephemeral ports (${services.join(', ')})`, async () => {
        const kernel = await openTestKernel({
          database,
          config: { runtime: { port: 0 }, gateway: { port: 0 } },
        });
        const serving = await serve(kernel, services);
        try {
          const wallet = newWallet();
          const token = await mintDelegatedToken(serving.urls.runtime as string, wallet);
          const session = await fetch(`${serving.urls.gateway as string}/api/auth/session`, {
            headers: { authorization: `Bearer ${token}` },
          });
          expect(session.status).to.equal(200);
          expect(await session.json()).to.include({
            address: wallet.address,
            method: 'delegated-jwt',
            trust: 'degraded_no_attestation',
          });
        } finally {
          await serving.stop();
        }
      });
  });

  describe('rotation', () => {
    it('reads the JWKS again on an unknown kid (once per cooldown), accepts current and previous keys', async () => {
      const first = newKey();
      const second = newKey();
      const stack = await Stack.start({ database, config: { runtime: { mcpSigningKey: pem(first) } } });
      const jwksReads = () =>
        stack.runtimeRequests().filter((line) => line.startsWith('GET /.well-known/jwks.json')).length;
      try {
        const wallet = newWallet();
        const old = await stack.runtime.delegation.sign(wallet.address, GATEWAY_PUBLIC);
        expect((await gatewaySession(stack, old.token)).status).to.equal(200);
        expect(jwksReads()).to.equal(1);

        // The runtime restarts with a new key and publishes the old one as previous.
        stack.kernel.config.runtime.mcpSigningKey = pem(second);
        stack.kernel.config.runtime.mcpSigningKeyPrevious = pem(first);
        const rotated = await createRuntimeApp(stack.kernel);
        stack.replaceRuntime(rotated);
        const fresh = await rotated.delegation.sign(wallet.address, GATEWAY_PUBLIC);
        expect(fresh.kid).to.not.equal(old.kid);
        expect((await rotated.delegation.jwks()).keys.map((key) => key.kid)).to.deep.equal([
          fresh.kid,
          old.kid,
        ]);

        // Just read: an unknown kid does not make the gateway read again yet (no refetch storms).
        await expectRefused(stack, fresh.token, /no applicable key|matching key/i);
        expect(jwksReads()).to.equal(1);
        stack.clock.advance(31_000);
        expect((await gatewaySession(stack, fresh.token)).status).to.equal(200);
        expect(jwksReads()).to.equal(2);
        expect((await gatewaySession(stack, old.token)).status).to.equal(200);
        expect(jwksReads()).to.equal(2);

        // Rotation done: the previous key leaves the JWKS, and after the cache period its tokens stop.
        stack.kernel.config.runtime.mcpSigningKeyPrevious = undefined;
        stack.replaceRuntime(await createRuntimeApp(stack.kernel));
        stack.clock.advance(301_000);
        const late = await stack.runtime.delegation.sign(wallet.address, GATEWAY_PUBLIC);
        await expectRefused(stack, late.token, /no applicable key|matching key/i);
      } finally {
        await stack.close();
      }
    });
  });

  describe('attestation report', () => {
    it('serves the attestation report: evidence null with tee-none, REPORT_DATA laid out as documented', async () => {
      const stack = await Stack.start({ database });
      try {
        const nonce = 'ab'.repeat(32);
        const res = await stack.get('runtime', `/api/attestation/report?nonce=${nonce}`);
        const report = (await res.json()) as Record<string, string | null>;
        const jwks = await (await stack.get('runtime', '/.well-known/jwks.json')).json();
        const hash = jwksSha256(jwks).toString('hex');
        expect(report).to.include({ platform: 'none', evidence: null, nonce, jwksSha256: hash });
        const { keyid } = (await (await stack.get('runtime', '/api/attestation/provenance')).json()) as {
          keyid: string;
        };
        expect(report.reportData).to.equal(`${nonce}${hash.slice(0, 32)}${keyid.slice(0, 32)}`);
        expect((await stack.get('runtime', '/api/attestation/report?nonce=xyz')).status).to.equal(400);
        const summary = (await (await stack.get('runtime', '/api/attestation')).json()) as Record<
          string,
          unknown
        >;
        expect(summary).to.include({ teeEnabled: false, platform: 'none' });
      } finally {
        await stack.close();
      }
    });
  });
});
