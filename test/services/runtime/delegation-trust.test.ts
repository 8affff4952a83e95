import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Client, SdkHttpError } from '@modelcontextprotocol/client';
import { expect } from 'chai';
import type { AttestationEvidenceV2 } from '@sigil/plugin-api';
import teeNone from '../../../attestation/none/index.ts';
import { unsealKeys } from '../../../attestation/vtpm/seal.ts';
import { Tpm } from '../../../attestation/vtpm/tpm.ts';
import { jwksSha256 } from '../../../core/auth/delegation/report-data.ts';
import { hmacSha256 } from '../../../core/crypto.ts';
import { SecretRegistry } from '../../../core/log.ts';
import { createRuntimeApp } from '../../../services/runtime/app.ts';
import { serve } from '../../../services/serve.ts';
import { newWallet } from '../../core/auth/support.ts';
import { sendJson, startTinyServer, type TinyServer } from '../../conformance/support.ts';
import { openTestKernel, quietLogger, TEST_DATABASES } from '../../support/kernel.ts';
import { captureLogs } from '../../support/logs.ts';
import { sealedVtpm, type SealedVtpmEntry } from '../../support/sealed-vtpm.ts';
import { gatewaySession, mintDelegatedToken, pluginsWithTee, Stack, type StackOptions } from './support.ts';

const pem = () =>
  generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({
    format: 'pem',
    type: 'pkcs8',
  }) as string;

type Json = Record<string, unknown>;

/**
 * The delegated path's trust states from real evidence, end to end: both services on tee-vtpm over a
 * swtpm, its keys sealed by `sigil tee seal`'s code, the gateway judging the runtime's quotes with
 * tee-vtpm's own verifier. No fake TEE and no fake verifier.
 */
describe('the runtime’s trust, judged by the gateway from vTPM quotes (swtpm)', function () {
  this.timeout(300_000);
  const database = TEST_DATABASES[0]!;
  let tpm: SealedVtpmEntry;
  before(async () => {
    tpm = await sealedVtpm();
  });
  after(() => tpm?.remove());

  /** A Stack whose one kernel (both services) loads tee-vtpm on the sealed TPM. */
  const onVtpm = (options: Partial<StackOptions> = {}): Promise<Stack> =>
    Stack.start({
      database,
      ...options,
      config: { ...options.config, plugins: pluginsWithTee(tpm.entry) },
    });

  const json = async (stack: Stack, service: 'runtime' | 'gateway', path: string): Promise<Json> => {
    const res = await stack.get(service, path);
    expect(res.status, `${service} ${path}`).to.equal(200);
    return (await res.json()) as Json;
  };

  /** The runtime restarted on the same kernel with another MCP_SIGNING_KEY; the sealed blobs are unchanged. */
  const restartWithAnotherKey = async (stack: Stack) => {
    stack.kernel.config.runtime.mcpSigningKey = pem();
    const restarted = await createRuntimeApp(stack.kernel, { gatewayUrl: stack.url('gateway') });
    stack.replaceRuntime(restarted);
    // Past the gateway's cache period (300 s): it reads the JWKS and a new report again.
    stack.clock.advance(301_000);
    return restarted;
  };

  it('trusted: the runtime signs with its sealed key, whose JWKS its quote binds; both services say sealed', async () => {
    const stack = await onVtpm();
    try {
      const wallet = newWallet();
      const session = await gatewaySession(stack, await stack.gatewayToken(await stack.signIn(wallet)));
      expect(session.status).to.equal(200);
      expect(session.body).to.include({ trust: 'trusted', trustPlatform: 'vtpm' });
      expect(session.trustHeader).to.equal('trusted');

      // A delegated call through the gateway, by the runtime's own transport (its delegated JWT).
      const client = new Client({ name: 'sigil-test', version: '1.0.0' });
      await client.connect(await stack.runtime.gateway.delegatedTransport(wallet.address));
      const listed = await client.callTool({ name: 'gateway_list_enabled', arguments: {} });
      expect(listed.isError ?? false).to.equal(false);
      await client.close();

      // The key that signs is the one `sigil tee seal` sealed (it printed its kid).
      const jwks = (await json(stack, 'runtime', '/.well-known/jwks.json')) as { keys: { kid: string }[] };
      expect(jwks.keys).to.have.length(1);
      expect(tpm.printed).to.include(`mcp-signing-key (new, kid ${jwks.keys[0]?.kid})`);
      const runtimeSummary = await json(stack, 'runtime', '/api/attestation');
      expect(runtimeSummary).to.include({ teeEnabled: true, platform: 'vtpm', keySource: 'sealed' });
      expect(runtimeSummary.jwksSha256).to.equal(jwksSha256(jwks).toString('hex'));
      expect(runtimeSummary.delegation).to.deep.equal({
        jwksSha256: jwksSha256(jwks).toString('hex'),
        signingKey: 'sealed',
      });
      const runtimeSecurity = await json(stack, 'runtime', '/api/attestation/security');
      expect(runtimeSecurity.keySources).to.deep.equal({ mcpSigningKey: 'sealed' });
      expect(runtimeSecurity.tee).to.include({ keySource: 'sealed' });

      // The gateway's proof key is the sealed execution-proof key: its fingerprint is the sealed key's.
      const sealed = await unsealKeys(new Tpm(tpm.swtpm.tcti), tpm.entry.options.sealedDir as string);
      const gatewaySummary = await json(stack, 'gateway', '/api/attestation');
      expect(gatewaySummary).to.include({
        teeEnabled: true,
        platform: 'vtpm',
        keySource: 'sealed',
        proofKeyFingerprint: hmacSha256(
          sealed.get('execution-proof') as Uint8Array,
          'sigil:proof-key-fingerprint',
        ).toString('hex'),
      });
      expect(gatewaySummary.runtimeTrust).to.include({ state: 'trusted', platform: 'vtpm' });
      expect(Date.parse((gatewaySummary.runtimeTrust as Json).checkedAt as string)).to.equal(
        stack.clock.now().getTime(),
      );
      const gatewaySecurity = await json(stack, 'gateway', '/api/attestation/security');
      expect(gatewaySecurity.keySources).to.deep.equal({ executionProof: 'sealed' });
    } finally {
      await stack.close();
    }
  });

  it('trusted in one process too (sigil up), the gateway reading the runtime it serves directly', async () => {
    const kernel = await openTestKernel({
      database,
      config: { runtime: { port: 0 }, gateway: { port: 0 }, plugins: pluginsWithTee(tpm.entry) },
    });
    const serving = await serve(kernel, ['runtime', 'gateway']);
    try {
      const token = await mintDelegatedToken(serving.urls.runtime as string, newWallet());
      const session = await fetch(`${serving.urls.gateway as string}/api/auth/session`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(await session.json()).to.include({ trust: 'trusted', trustPlatform: 'vtpm' });
    } finally {
      await serving.stop();
    }
  });

  it('degraded_hash_mismatch: the runtime restarts with another MCP_SIGNING_KEY and no new seal, and warns at start-up', async () => {
    const logs = captureLogs();
    const stack = await onVtpm({ logs: logs.stream });
    try {
      const sealedJwks = await json(stack, 'runtime', '/.well-known/jwks.json');
      const restarted = await restartWithAnotherKey(stack);
      const warning = logs
        .text()
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Json)
        .find((line) => line.level === 40 && /not the sealed signing key/.test(String(line.msg)));
      expect(warning?.msg).to.match(
        /bind the JWKS of the sealed one.*degraded_hash_mismatch.*sigil tee seal/,
      );
      expect(warning).to.include({ sealedKid: (sealedJwks.keys as { kid: string }[])[0]?.kid });
      expect(warning?.kid).to.equal(await restarted.delegation.currentKid());

      // It serves and signs with the configured key; its reports still bind the sealed key's JWKS.
      const served = await json(stack, 'runtime', '/.well-known/jwks.json');
      expect(served).to.not.deep.equal(sealedJwks);
      const summary = await json(stack, 'runtime', '/api/attestation');
      expect(summary.jwksSha256).to.equal(jwksSha256(sealedJwks).toString('hex'));
      expect(summary.delegation).to.deep.equal({
        jwksSha256: jwksSha256(served).toString('hex'),
        signingKey: 'config',
      });

      const session = await gatewaySession(stack, await stack.gatewayToken(await stack.signIn(newWallet())));
      expect(session.status).to.equal(200);
      expect(session.body).to.include({ trust: 'degraded_hash_mismatch', trustPlatform: 'vtpm' });
      expect(session.body.trustReason).to.include(
        `JWKS hash ${jwksSha256(sealedJwks).toString('hex').slice(0, 32)} at [32:48], not ${jwksSha256(served).toString('hex').slice(0, 32)}`,
      );
      expect(session.trustHeader).to.equal('degraded_hash_mismatch');
      expect((await json(stack, 'gateway', '/api/attestation')).runtimeTrust).to.include({
        state: 'degraded_hash_mismatch',
      });
    } finally {
      await stack.close();
    }
  });

  it('requireTrusted: the delegated call goes through while trusted, and is refused (typed) once the key changed', async () => {
    const stack = await onVtpm({
      config: { gateway: { delegation: { enabled: true, cacheSeconds: 300, requireTrusted: true } } },
    });
    try {
      const wallet = newWallet();
      const callTool = async (runtime = stack.runtime) => {
        const client = new Client({ name: 'sigil-test', version: '1.0.0' });
        try {
          await client.connect(await runtime.gateway.delegatedTransport(wallet.address));
          return await client.callTool({ name: 'gateway_list_enabled', arguments: {} });
        } finally {
          await client.close();
        }
      };
      expect((await callTool()).isError ?? false).to.equal(false);

      const restarted = await restartWithAnotherKey(stack);
      const token = await stack.gatewayToken(await stack.signIn(wallet));
      const refused = await stack.get('gateway', '/api/auth/session', token);
      expect(refused.status).to.equal(401);
      const error = (await refused.json()) as Json;
      expect(error).to.include({ code: 'unauthorized' });
      expect(error.details).to.deep.equal({ reason: 'runtime_not_trusted', trust: 'degraded_hash_mismatch' });
      let failure: unknown;
      await callTool(restarted).catch((err: unknown) => (failure = err));
      // The SDK's error carries the status and the gateway's JSON error as it was sent.
      expect(failure).to.be.instanceOf(SdkHttpError).with.property('status', 401);
      expect((failure as SdkHttpError).data.text).to.include('"reason":"runtime_not_trusted"');
    } finally {
      await stack.close();
    }
  });

  it('production: the sealed key stands for MCP_SIGNING_KEY, which production otherwise requires', async () => {
    const vaultDir = mkdtempSync(join(tmpdir(), 'sigil-vault-'));
    const kernel = await openTestKernel({
      database,
      config: { mode: 'production', vault: { persistenceDir: vaultDir }, plugins: pluginsWithTee(tpm.entry) },
    });
    try {
      const runtime = await createRuntimeApp(kernel);
      expect(runtime.delegation.source).to.equal('sealed');
      await runtime.close();
    } finally {
      await kernel.close();
      rmSync(vaultDir, { recursive: true, force: true });
    }
  });

  it('degraded_no_attestation: a gateway without a vtpm backend (here tee-none’s verifier) cannot judge a vtpm runtime', async () => {
    const none = await teeNone.create({
      config: teeNone.config.parse({}),
      deps: { secrets: new SecretRegistry() },
      logger: quietLogger(),
    });
    const stack = await onVtpm({ gateway: { evidenceVerifiers: [none] } });
    try {
      const session = await gatewaySession(stack, await stack.gatewayToken(await stack.signIn(newWallet())));
      expect(session.body).to.include({ trust: 'degraded_no_attestation', trustPlatform: 'vtpm' });
      expect(session.body.trustReason).to.match(/loads no vtpm TEE backend/);
    } finally {
      await stack.close();
    }
  });

  it('the gateway’s summary says why it cannot judge a runtime whose JWKS it cannot read', async () => {
    const unreachable = await startTinyServer((_request, response) => sendJson(response, 503, {}));
    const stack = await Stack.start({
      database,
      config: {
        gateway: {
          delegation: {
            enabled: true,
            cacheSeconds: 300,
            requireTrusted: false,
            runtimeUrl: unreachable.url,
          },
        },
      },
    });
    try {
      const { runtimeTrust } = await json(stack, 'gateway', '/api/attestation');
      expect(runtimeTrust).to.have.nested.property('error.code', 'unauthorized');
      expect((runtimeTrust as { error: { message: string } }).error.message).to.include(unreachable.url);
    } finally {
      await stack.close();
      await unreachable.close();
    }
  });

  describe('a quote tampered with between the runtime and the gateway', () => {
    let proxy: TinyServer;
    let runtimeUrl = '';
    /** Forwards to the runtime, flipping one bit of the quote's clock in each attestation report. */
    const tampering = async (request: IncomingMessage, response: ServerResponse) => {
      const upstream = await fetch(`${runtimeUrl}${request.url ?? '/'}`);
      const body = (await upstream.json()) as { evidence?: AttestationEvidenceV2 | null };
      if (request.url?.startsWith('/api/attestation/report') && body.evidence) {
        const quote = Buffer.from(body.evidence.report, 'base64');
        // TPMS_ATTEST: magic, type, qualifiedSigner (TPM2B), extraData (TPM2B), then clockInfo.
        const extraData = 8 + quote.readUInt16BE(6);
        const clock = extraData + 2 + quote.readUInt16BE(extraData);
        quote[clock + 7] = (quote[clock + 7] as number) ^ 0x01;
        body.evidence = { ...body.evidence, report: quote.toString('base64') };
      }
      sendJson(response, upstream.status, body);
    };
    before(async () => {
      proxy = await startTinyServer((request, response) => void tampering(request, response));
    });
    after(() => proxy?.close());

    it('degraded_no_attestation, naming the signature check that failed', async () => {
      const stack = await onVtpm({
        config: {
          gateway: {
            delegation: { enabled: true, cacheSeconds: 300, requireTrusted: false, runtimeUrl: proxy.url },
          },
        },
      });
      try {
        runtimeUrl = stack.url('runtime');
        const session = await gatewaySession(
          stack,
          await stack.gatewayToken(await stack.signIn(newWallet())),
        );
        expect(session.body).to.include({ trust: 'degraded_no_attestation', trustPlatform: 'vtpm' });
        expect(session.body.trustReason).to.match(/^the vtpm evidence does not verify: signature \(/);
        expect((await json(stack, 'gateway', '/api/attestation')).runtimeTrust).to.deep.include({
          state: 'degraded_no_attestation',
          failedChecks: ['signature'],
        });
      } finally {
        await stack.close();
      }
    });
  });
});
