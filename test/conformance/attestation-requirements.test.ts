import { createHash, generateKeyPairSync } from 'node:crypto';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { expect } from 'chai';
import type { CheckResult } from '@sigil/plugin-api/kit';
import { attestationRequirements } from '../../conformance/deployment/attestation/index.ts';
import { sealedOnSwtpm, type SealedVtpm } from '../attestation/vtpm/on-swtpm.ts';
import { pluginsWithTee, Stack } from '../services/runtime/support.ts';
import { TEST_DATABASES } from '../support/kernel.ts';
import { runRequirements, sendJson, startTinyServer, type TinyServer } from './support.ts';

const TRUST_STATE = 'RT-3.trust-state-reported';
const ATTESTATION_IDS = attestationRequirements.map((requirement) => requirement.id);
const TEE_IDS = attestationRequirements
  .filter((requirement) => requirement.groups?.includes('tee'))
  .map((requirement) => requirement.id);
const REPORT = '/api/attestation/report';

type Json = Record<string, unknown>;
/** By path: the body to answer instead of the service's, which may also change the response's headers. */
type Rewrites = Record<string, (body: Json, url: URL, headers: IncomingHttpHeaders) => unknown>;

interface Target {
  runtimeUrl: string;
  gatewayUrl: string;
}

const direct = (stack: Stack): Target => ({
  runtimeUrl: stack.url('runtime'),
  gatewayUrl: stack.url('gateway'),
});

const failing = (results: Record<string, CheckResult>) =>
  Object.values(results)
    .filter((result) => result.status !== 'pass')
    .map((result) => `${result.id}: ${result.status}: ${result.reason}`);

/** Every result failed, each for `reason` (a string is the whole reason). */
function expectEachFails(results: Record<string, CheckResult>, reason: RegExp | string): void {
  for (const result of Object.values(results)) {
    expect(result.status, result.id).to.equal('fail');
    if (typeof reason === 'string') expect(result.reason, result.id).to.equal(reason);
    else expect(result.reason, result.id).to.match(reason);
  }
}

/** The loopback address the next proxy reaches its service from (127.0.0.N; Linux routes all of 127/8 to lo). */
let nextLoopbackHost = 10;

/**
 * A deployment that lies: a proxy in front of one service of a real stack, forwarding every request
 * and rewriting the JSON body of the paths `rewrites` names. It reaches the service from a loopback
 * address of its own, so the attestation endpoints' rate limit (60 a minute per address) counts each
 * proxy's requests apart from the other tests'.
 */
function startLyingProxy(target: string, rewrites: Rewrites): Promise<TinyServer> {
  const localAddress = `127.0.0.${nextLoopbackHost++}`;
  return startTinyServer((request, response) => {
    const url = new URL(request.url ?? '/', target);
    const upstream = httpRequest(
      url,
      { method: request.method, headers: { ...request.headers, host: url.host }, localAddress },
      (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => chunks.push(chunk));
        answer.on('end', () => {
          const rewrite = rewrites[url.pathname];
          const body = Buffer.concat(chunks);
          const { 'content-length': _length, 'transfer-encoding': _encoding, ...headers } = answer.headers;
          const sent = rewrite
            ? Buffer.from(JSON.stringify(rewrite(JSON.parse(body.toString()) as Json, url, headers)))
            : body;
          response.writeHead(answer.statusCode ?? 502, headers);
          response.end(sent);
        });
      },
    );
    upstream.on('error', (err) => {
      response.writeHead(502);
      response.end(err.message);
    });
    request.pipe(upstream);
  });
}

const database = TEST_DATABASES[0]!;

/** Both services on tee-vtpm with `options`, on a swtpm of their own whose keys `sigil tee seal`'s code sealed. */
async function vtpmStack(options: Json = {}): Promise<{ stack: Stack; close(): Promise<void> }> {
  const vtpm: SealedVtpm = await sealedOnSwtpm();
  const stack = await Stack.start({
    database,
    config: {
      plugins: pluginsWithTee({
        resolve: 'tee-vtpm',
        enabled: true,
        options: { tcti: vtpm.swtpm.tcti, sealedDir: vtpm.sealedDir, ...options },
      }),
    },
  });
  return {
    stack,
    close: async () => {
      await stack.close();
      await vtpm.remove();
    },
  };
}

describe('conformance: the attestation endpoints and what their reports bind', function () {
  this.timeout(180_000);

  describe('against Sigil with tee-none (npm start)', () => {
    let stack: Stack;
    before(async () => {
      stack = await Stack.start({ database });
    });
    after(() => stack?.close());

    it('passes every endpoint requirement, and fails each one that needs a TEE, saying the deployment has none', async () => {
      const results = await runRequirements(direct(stack), [...ATTESTATION_IDS, TRUST_STATE]);
      expect(TEE_IDS).to.have.members([
        'RT-4.attestation-report',
        'GW-4.attestation-report',
        'RT-4.attestation-bundle',
        'GW-4.attestation-bundle',
        'RT-2.jwks-hash-report-data',
        'GW-2.proof-key-report-data',
        'RT-4.provenance-key-report-data',
        'GW-4.provenance-key-report-data',
      ]);
      expectEachFails(
        Object.fromEntries(TEE_IDS.map((id) => [id, results[id]!])),
        /^the (runtime|gateway) has no TEE: its report carries no evidence .* --skip tee$/,
      );
      expect(failing(results).filter((line) => !TEE_IDS.some((id) => line.startsWith(id)))).to.deep.equal([]);
    });
  });

  describe('against a report endpoint that answers any nonce', () => {
    let server: TinyServer;
    before(async () => {
      server = await startTinyServer((request, response) =>
        sendJson(response, request.url?.startsWith(`${REPORT}?nonce=zz`) ? 500 : 200, { evidence: null }),
      );
    });
    after(() => server?.close());

    it('fails the bad-nonce requirement, naming the nonce answered with other than a 4xx', async () => {
      const results = await runRequirements({ runtimeUrl: server.url, gatewayUrl: server.url }, [
        'RT-4.attestation-report-bad-nonce',
      ]);
      expect(results['RT-4.attestation-report-bad-nonce']?.reason).to.equal(
        `the runtime answered 500 to the nonce ${'zz'.repeat(32)}, not a 4xx refusal`,
      );
    });
  });

  describe('against Sigil with tee-vtpm on swtpm, its keys sealed as `sigil tee seal` seals them', () => {
    let running: Awaited<ReturnType<typeof vtpmStack>>;
    let stack: Stack;
    let proxies: TinyServer[] = [];
    before(async () => {
      running = await vtpmStack();
      stack = running.stack;
    });
    after(() => running?.close());
    afterEach(async () => {
      await Promise.all(proxies.map((proxy) => proxy.close()));
      proxies = [];
    });

    /** The stack with `runtime` and `gateway` rewrites applied by proxies in front of them. */
    const lying = async (rewrites: { runtime?: Rewrites; gateway?: Rewrites }): Promise<Target> => {
      const [runtime, gateway] = await Promise.all([
        startLyingProxy(stack.url('runtime'), rewrites.runtime ?? {}),
        startLyingProxy(stack.url('gateway'), rewrites.gateway ?? {}),
      ]);
      proxies.push(runtime, gateway);
      return { runtimeUrl: runtime.url, gatewayUrl: gateway.url };
    };

    /** A report the service made earlier, for another nonce: what a replaying deployment serves. */
    const recordedReport = async (service: 'runtime' | 'gateway'): Promise<Json> =>
      (await (await stack.get(service, `${REPORT}?nonce=${'5e'.repeat(32)}`)).json()) as Json;

    it('passes every attestation requirement and the trust state', async () => {
      const results = await runRequirements(direct(stack), [...ATTESTATION_IDS, TRUST_STATE]);
      expect(failing(results)).to.deep.equal([]);
      expect(Object.keys(results)).to.have.members([...ATTESTATION_IDS, TRUST_STATE]);
      const note = results['RT-4.attestation-report']?.evidence.find(
        (entry) => entry.kind === 'note' && entry.text === "the runner's vtpm verification",
      ) as { data: { verified: boolean; checks: { id: string; ok: boolean }[] } } | undefined;
      expect(note?.data.verified).to.equal(true);
      expect(note?.data.checks.map((check) => check.id)).to.include.members(['signature', 'report-data']);
    });

    it('fails the nonce and binding requirements on a replayed report, which verifies but is not fresh', async () => {
      const old = { runtime: await recordedReport('runtime'), gateway: await recordedReport('gateway') };
      const target = await lying({
        runtime: { [REPORT]: () => old.runtime },
        gateway: { [REPORT]: () => old.gateway },
      });
      // The bundle is asked for apart, with a report made for it: only the reports are replayed here.
      const reportIds = TEE_IDS.filter((id) => !id.endsWith('.attestation-bundle'));
      const results = await runRequirements(target, reportIds);
      expect(Object.keys(results)).to.have.members(reportIds);
      expectEachFails(
        results,
        /^REPORT_DATA\[0:32\] of the verified report is (5e){32}, not the runner's fresh nonce [0-9a-f]{64}: the report is not fresh/,
      );
    });

    it("fails them on a replayed report whose reportData and nonce fields say the caller's nonce: the quote does not", async () => {
      const old = await recordedReport('runtime');
      const target = await lying({
        runtime: {
          [REPORT]: (_fresh, url) => {
            const nonce = url.searchParams.get('nonce') as string;
            return { ...old, nonce, reportData: nonce + String(old.reportData).slice(64) };
          },
        },
      });
      const results = await runRequirements(target, [
        'RT-4.attestation-report',
        'RT-2.jwks-hash-report-data',
      ]);
      expectEachFails(
        results,
        /^the vtpm evidence does not verify: report-data: the quote's qualifying data [0-9a-f]+ is not the expected REPORT_DATA/,
      );
    });

    it('fails them on evidence with one bit flipped, naming the signature', async () => {
      const target = await lying({
        gateway: {
          [REPORT]: (fresh) => {
            const evidence = fresh.evidence as Json;
            const report = Buffer.from(String(evidence.report), 'base64');
            report[report.length - 1]! ^= 0x01;
            return { ...fresh, evidence: { ...evidence, report: report.toString('base64') } };
          },
        },
      });
      const results = await runRequirements(target, [
        'GW-4.attestation-report',
        'GW-2.proof-key-report-data',
      ]);
      expectEachFails(results, /^the vtpm evidence does not verify: .*signature: /);
    });

    it('fails them on evidence of a platform the runner has no verifier for', async () => {
      const target = await lying({
        runtime: {
          [REPORT]: (fresh) => ({
            ...fresh,
            evidence: { ...(fresh.evidence as Json), platform: 'acme-tee' },
          }),
        },
      });
      const results = await runRequirements(target, [
        'RT-4.attestation-report',
        'RT-2.jwks-hash-report-data',
      ]);
      expectEachFails(
        results,
        "the runner cannot verify acme-tee evidence (it verifies sev-snp, tdx, vtpm), so it cannot tell what REPORT_DATA the runtime's report binds",
      );
    });

    it('fails the bindings when the JWKS served or the proof key fingerprint stated is not what the report binds', async () => {
      const other = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ format: 'jwk' });
      const target = await lying({
        runtime: { '/.well-known/jwks.json': () => ({ keys: [{ ...other, kid: 'other', alg: 'ES256' }] }) },
        gateway: { '/api/attestation': (summary) => ({ ...summary, proofKeyFingerprint: 'ab'.repeat(32) }) },
      });
      const results = await runRequirements(target, [
        'RT-2.jwks-hash-report-data',
        'GW-2.proof-key-report-data',
      ]);
      expect(results['RT-2.jwks-hash-report-data']?.reason).to.match(
        /^REPORT_DATA\[32:48\] of the verified vtpm report is [0-9a-f]{32}, not the first 16 bytes of SHA-256 of the JWKS served/,
      );
      expect(results['GW-2.proof-key-report-data']?.reason).to.match(
        /^REPORT_DATA\[32:48\] of the verified vtpm report is [0-9a-f]{32}, not the first 16 bytes of the proofKeyFingerprint the summary states \((ab){16}\)$/,
      );
    });

    it('fails each endpoint requirement whose field is missing, naming the field', async () => {
      const without =
        (field: string) =>
        (body: Json): Json =>
          Object.fromEntries(Object.entries(body).filter(([name]) => name !== field));
      const target = await lying({
        runtime: {
          '/api/attestation': without('codeHash'),
          '/api/attestation/build-info': without('gitCommit'),
          [REPORT]: (fresh) => ({ ...fresh, evidence: without('certificates')(fresh.evidence as Json) }),
        },
        gateway: {
          '/api/attestation': without('proofKeyFingerprint'),
          '/api/attestation/security': without('tee'),
        },
      });
      const results = await runRequirements(target, [
        'RT-4.attestation-summary',
        'RT-4.attestation-build-info',
        'RT-4.attestation-report',
        'GW-2.proof-key-report-data',
        'GW-4.attestation-security',
      ]);
      const reasons = Object.fromEntries(Object.values(results).map((result) => [result.id, result.reason]));
      expect(reasons).to.deep.equal({
        'RT-4.attestation-summary':
          'GET /api/attestation on the runtime: codeHash: Invalid input: expected string, received undefined',
        'RT-4.attestation-build-info':
          'GET /api/attestation/build-info on the runtime: gitCommit: Invalid input: expected string, received undefined',
        'RT-4.attestation-report':
          'GET /api/attestation/report on the runtime: evidence.certificates: Invalid input: expected array, received undefined',
        'GW-2.proof-key-report-data':
          'GET /api/attestation on the gateway: proofKeyFingerprint: Invalid input: expected string, received undefined',
        'GW-4.attestation-security':
          'GET /api/attestation/security on the gateway: tee: Invalid input: expected object, received undefined',
      });
    });

    it('fails the summary, /security and /build-info where they disagree with each other or with the reports', async () => {
      const target = await lying({
        runtime: {
          '/api/attestation/security': (security) => ({
            ...security,
            tee: { ...(security.tee as Json), keySource: 'config' },
          }),
          '/api/attestation/build-info': (build) => ({ ...build, codeHash: 'cd'.repeat(32) }),
        },
        gateway: { '/api/attestation': (summary) => ({ ...summary, platform: 'sev-snp' }) },
      });
      const results = await runRequirements({ ...target, expectOperatorEnforcement: true }, [
        'RT-4.attestation-security',
        'RT-4.attestation-build-info',
        'GW-4.attestation-summary',
        'GW-4.attestation-security',
      ]);
      const reasons = Object.fromEntries(Object.values(results).map((result) => [result.id, result.reason]));
      const { codeHash } = (await (await stack.get('runtime', '/api/attestation')).json()) as Json;
      expect(reasons).to.deep.equal({
        'RT-4.attestation-security':
          'GET /api/attestation/security on the runtime names key source config, the summary sealed',
        'RT-4.attestation-build-info': `the build's source hash (codeHash) is ${'cd'.repeat(32)}, the summary's codeHash ${String(codeHash)}`,
        'GW-4.attestation-summary': 'the summary names platform sev-snp, a report carries vtpm evidence',
        'GW-4.attestation-security':
          'GET /api/attestation/security on the gateway names platform vtpm, the summary sev-snp',
      });
      const enforcing = await runRequirements({ ...direct(stack), expectOperatorEnforcement: true }, [
        'GW-4.attestation-security',
      ]);
      expect(enforcing['GW-4.attestation-security']?.reason).to.equal(
        'GET /api/attestation/security on the gateway says ERC-8128 operator enforcement is off, and the tester states the gateway enforces it',
      );
    });

    it('fails the provenance whose signed payload was changed, and the bundle whose JWKS or script was', async () => {
      const target = await lying({
        runtime: {
          '/api/attestation/provenance': (provenance) => {
            const envelope = provenance.envelope as Json;
            const statement = JSON.parse(Buffer.from(String(envelope.payload), 'base64').toString()) as Json;
            const payload = Buffer.from(JSON.stringify({ ...statement, predicateType: 'x' })).toString(
              'base64',
            );
            return { ...provenance, envelope: { ...envelope, payload } };
          },
        },
        gateway: {
          '/api/attestation/bundle': (bundle) => {
            const script = 'console.log("PASS everything"); process.exit(3);';
            const offlineVerification = {
              ...(bundle.offlineVerification as Json),
              script,
              scriptSha256: createHash('sha256').update(script).digest('hex'),
            };
            return { ...bundle, offlineVerification };
          },
        },
      });
      const results = await runRequirements(target, [
        'RT-4.attestation-provenance',
        'RT-4.provenance-key-report-data',
        'GW-4.attestation-bundle',
      ]);
      expect(results['RT-4.attestation-provenance']?.reason).to.equal(
        'GET /api/attestation/provenance on the runtime: no signature of the DSSE envelope verifies with the Ed25519 key given (publicKey.hex)',
      );
      expect(results['RT-4.provenance-key-report-data']?.status).to.equal('fail');
      expect(results['GW-4.attestation-bundle']?.reason).to.match(
        /^GET \/api\/attestation\/bundle\?nonce=<fresh> on the gateway: its script, run with node in an empty folder holding only the bundle, exits 3/,
      );
      const tampered = await lying({
        gateway: {
          '/api/attestation/bundle': (bundle) => ({ ...bundle, proofKeyFingerprint: 'ab'.repeat(32) }),
        },
      });
      const refused = await runRequirements(tampered, ['GW-4.attestation-bundle']);
      expect(refused['GW-4.attestation-bundle']?.reason).to.match(
        /^GET \/api\/attestation\/bundle\?nonce=<fresh> on the gateway: the runner's own verification fails: proof-key-fingerprint: /,
      );
    });

    it('fails the summary that says there is no TEE while the reports carry evidence', async () => {
      const target = await lying({
        runtime: { '/api/attestation': (summary) => ({ ...summary, teeEnabled: false }) },
      });
      const results = await runRequirements(target, ['RT-4.attestation-summary']);
      expect(results['RT-4.attestation-summary']?.reason).to.equal(
        'the summary says teeEnabled false, yet a report carries vtpm evidence',
      );
    });

    it('fails the trust state when the gateway calls trusted a runtime whose report the runner cannot rely on', async () => {
      const old = await recordedReport('runtime');
      const target = await lying({
        runtime: { [REPORT]: () => old },
        gateway: {
          '/api/auth/session': (session, _url, headers) => {
            headers['x-sigil-runtime-trust'] = 'trusted';
            return { ...session, trust: 'trusted' };
          },
        },
      });
      const results = await runRequirements(target, [TRUST_STATE]);
      expect(results[TRUST_STATE]).to.include({ status: 'fail' });
      expect(results[TRUST_STATE]?.reason).to.match(
        /^the runtime's report does not stand for the runner \(REPORT_DATA\[0:32\] .* the report is not fresh .*\), yet the gateway judges it "trusted"$/,
      );
    });
  });

  describe('against tee-vtpm whose quotes bind the SHA-256 of REPORT_DATA (a TPM without SHA-512)', () => {
    let running: Awaited<ReturnType<typeof vtpmStack>>;
    let proxy: TinyServer | undefined;
    before(async () => {
      running = await vtpmStack({ qualifyingData: 'sha256' });
    });
    afterEach(() => proxy?.close());
    after(() => running?.close());

    const runtimeOnly = ['RT-4.attestation-report', 'RT-2.jwks-hash-report-data'];

    it("reads REPORT_DATA from the report's reportData once the quote is shown to bind its SHA-256", async () => {
      const results = await runRequirements(direct(running.stack), runtimeOnly);
      expect(failing(results)).to.deep.equal([]);
    });

    it('fails without the reportData the quote binds the digest of, and on a reportData the quote does not bind', async () => {
      proxy = await startLyingProxy(running.stack.url('runtime'), {
        [REPORT]: (fresh) => ({ ...fresh, reportData: undefined }),
      });
      const withheld = await runRequirements(
        { runtimeUrl: proxy.url, gatewayUrl: running.stack.url('gateway') },
        runtimeOnly,
      );
      expectEachFails(
        withheld,
        'the verified vtpm report binds a digest of REPORT_DATA, and the report shows no reportData (64 bytes in hex) to check against it',
      );
      await proxy.close();
      proxy = await startLyingProxy(running.stack.url('runtime'), {
        [REPORT]: (fresh) => ({
          ...fresh,
          reportData: `${String(fresh.reportData).slice(0, 64)}${'ab'.repeat(32)}`,
        }),
      });
      const rewritten = await runRequirements(
        { runtimeUrl: proxy.url, gatewayUrl: running.stack.url('gateway') },
        runtimeOnly,
      );
      expectEachFails(
        rewritten,
        /^the vtpm evidence does not verify: report-data: the quote's qualifying data [0-9a-f]{64} is not the expected REPORT_DATA's SHA-256$/,
      );
    });
  });
});
