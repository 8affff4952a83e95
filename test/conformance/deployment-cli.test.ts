import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { CheckResult } from '@sigil/plugin-api/kit';
import { REPORT_FILES, type Report } from '../../conformance/report.ts';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import { probeEntry } from '../services/gateway/support.ts';
import { ledgerOnChain } from '../services/runtime/ledger/chain-support.ts';
import { railPlugin } from '../services/gateway/payments/support.ts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { leakedIn, makeCanaries } from './canaries.ts';
import { startVerdaccio, type Verdaccio } from '../support/verdaccio.ts';
import { findAll, parseXml } from './strict-xml.ts';
import {
  reportDir,
  runSigil,
  sendJson,
  startSigil,
  startTinyServer,
  type CliRun,
  type RunningSigil,
  type TinyServer,
} from './support.ts';

interface DeploymentRun extends CliRun {
  report: Report;
  junit: string;
  summary: string;
  /** Results by id. */
  results: Record<string, CheckResult>;
}

/** `sigil conformance deployment` against two base URLs, with the three report files read back. */
async function certify(
  urls: { runtime: string; gateway: string },
  args: readonly string[] = [],
  env: Record<string, string> = {},
): Promise<DeploymentRun> {
  const out = reportDir();
  try {
    const run = await runSigil(
      [
        'conformance',
        'deployment',
        '--runtime',
        urls.runtime,
        '--gateway',
        urls.gateway,
        '--out',
        out.dir,
        ...args,
      ],
      env,
    );
    const report = JSON.parse(out.read(REPORT_FILES.json)) as Report;
    return {
      ...run,
      report,
      junit: out.read(REPORT_FILES.junit),
      summary: out.read(REPORT_FILES.markdown),
      results: Object.fromEntries(report.results.map((result) => [result.id, result])),
    };
  } finally {
    out.cleanup();
  }
}

const urlsOf = (sigil: RunningSigil) => ({ runtime: sigil.runtimeUrl, gateway: sigil.gatewayUrl });
const bothAt = (server: TinyServer) => ({ runtime: server.url, gateway: server.url });

const probePackage = join(import.meta.dirname, '..', 'fixtures', 'mcp', 'probe-package');
/** The registry requirements of the kinds other than npm (registry-requirements.test.ts runs them). */
const ABSENT_KIND = /^GW-2\.(registry|proof)-pin-(pypi|oci|git|other)$/;

/**
 * What `sigil up` needs to serve MCP servers, from a local registry instead of npmjs.org: a catalog
 * with the probe server (smoke tool `echo`, an optional secret PROBE_TOKEN) and a deny-listed copy of
 * it, npm from verdaccio, the built-in sandbox, and the warmup at start-up.
 */
function gatewayWithServers(registry: Verdaccio, dir: string) {
  const catalogFile = join(dir, 'catalog.json');
  writeFileSync(
    catalogFile,
    JSON.stringify({
      servers: [
        {
          id: 'probe',
          ...probeEntry,
          // A declared secret and the probe's `env` tool make the secret and redaction checks apply.
          secrets: [{ name: 'PROBE_TOKEN', required: false }],
        },
        { id: 'blocked-probe', ...probeEntry, title: 'Blocked probe' },
      ],
    }),
  );
  return {
    gateway: {
      includeDefaultCatalog: false,
      catalogFile,
      denyList: ['blocked-probe'],
      warmupAtStart: true,
    },
    plugins: [
      { resolve: 'tee-none', enabled: true, options: {} },
      {
        resolve: 'registry-npm',
        enabled: true,
        options: { registry: registry.url, cacheDir: join(dir, 'packages') },
      },
      { resolve: 'sandbox-linux-namespaces', enabled: true, options: { stateDir: join(dir, 'sandboxes') } },
    ],
  };
}

/** Waits for the start-up warmup to have verified every server it can. */
async function warmedUp(gatewayUrl: string): Promise<void> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const status = (await (await fetch(`${gatewayUrl}/api/warmup/status`)).json()) as {
      summary: { running: unknown; lastRun: string | null; verified: number };
    };
    if (status.summary.running === null && status.summary.lastRun !== null) {
      expect(status.summary.verified, 'servers verified by the warmup').to.equal(1);
      return;
    }
    if (Date.now() > deadline) throw new Error('the gateway warmup did not finish in 90 s');
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
describe('sigil conformance deployment', function () {
  this.timeout(60_000);

  const operatorKey = generatePrivateKey();
  const operator = privateKeyToAccount(operatorKey).address;
  /**
   * ERC8128_ENFORCE_OPERATOR_MCP=true, with one operator wallet whose key the tester holds, MCP
   * servers from a local registry, warmed up, and tool calls paid with x402 on a dev chain: the whole
   * catalog runs against it.
   */
  let enforcing: RunningSigil;
  let chain: DevChain | undefined;
  /** The same operator wallet, enforcement off (the default). */
  let lenient: RunningSigil;
  let registry: Verdaccio | undefined;
  let dir: string | undefined;

  before(async function () {
    this.timeout(180_000);
    registry = await startVerdaccio({ packages: [{ dir: probePackage }] });
    // Not under /tmp: the sandbox mounts a private /tmp over it. The sandbox user must reach it.
    dir = mkdtempSync(join('/var/tmp', 'sigil-conformance-'));
    chmodSync(dir, 0o755);
    const servers = gatewayWithServers(registry, dir);
    chain = await startDevChain();
    enforcing = await startSigil({
      ...servers,
      // provider-local, as sigil up adds it: the chat requirements need a model to chat with.
      plugins: [
        ...servers.plugins,
        railPlugin(chain).plugin,
        { resolve: 'provider-local', enabled: true, options: {} },
        // The node kinds the canvas requirements run.
        ...['canvas-transform', 'canvas-approval', 'canvas-workspace'].map((resolve) => ({
          resolve,
          enabled: true,
          options: {},
        })),
      ],
      runtime: { canvas: { dataDir: join(dir, 'canvas') } } as never,
      gateway: { ...servers.gateway, operatorWallets: [operator], erc8128EnforceOperatorMcp: true },
      // The wallet ledger on the same chain, so the payer can also deposit and withdraw.
      ledger: ledgerOnChain(chain, { confirmations: 1, pollIntervalMs: 100 }),
    });
    lenient = await startSigil({ gateway: { operatorWallets: [operator] } });
    await warmedUp(enforcing.gatewayUrl);
  });
  after(async () => {
    await enforcing?.stop();
    await lenient?.stop();
    await registry?.stop();
    await chain?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('sigil conformance deployment passes against a real sigil up that charges, with a payer', async function () {
    this.timeout(300_000);
    const payerKey = (chain as DevChain).accounts.payer.privateKey;
    // The keys go in without 0x, through the environment: they must still be used, and never shown.
    const bareKey = operatorKey.slice(2);
    // As the README runs it against npm start: tee-none, so the requirements that need a TEE are left out.
    const run = await certify(urlsOf(enforcing), ['--expect-operator-enforcement', '--skip', 'tee'], {
      SIGIL_CONFORMANCE_OPERATOR_KEY: bareKey,
      SIGIL_CONFORMANCE_PAYER_KEY: payerKey.slice(2),
      SIGIL_CONFORMANCE_RPC_URL: (chain as DevChain).rpcUrl,
    });
    // It serves npm servers only: the requirements of the other registry kinds do not apply.
    const absent = run.report.results.filter((result) => ABSENT_KIND.test(result.id));
    expect(absent).to.have.length(8);
    for (const result of absent) {
      expect(result.status, result.id).to.equal('not-applicable');
      expect(result.reason, result.id).to.match(
        /^GET \/api\/servers lists no server of .* \(it lists kinds npm\)$/,
      );
    }
    const failures = run.report.results.filter(
      (result) => result.status !== 'pass' && !absent.includes(result),
    );
    expect(failures.map((result) => `${result.id}: ${result.reason}`)).to.deep.equal([]);
    expect(run.code, run.stderr).to.equal(0);
    const needTee = REQUIREMENTS.filter((requirement) => requirement.groups?.includes('tee'));
    expect(run.report.excluded.map((exclusion) => [exclusion.id, exclusion.excludedBy])).to.deep.equal(
      needTee.map((requirement) => [requirement.id, 'tee']),
    );
    expect(run.report.summary).to.include({
      total: REQUIREMENTS.length - needTee.length,
      pass: REQUIREMENTS.length - needTee.length - absent.length,
      notApplicable: absent.length,
      excluded: needTee.length,
    });
    expect(findAll(parseXml(run.junit), 'testcase')).to.have.length(REQUIREMENTS.length);
    expect(run.stdout).to.include('deployment conformance: OK');
    expect(run.stdout).to.include('-> excluded on request (--skip tee)');
    expect(run.stdout).to.include(`paying as ${(chain as DevChain).accounts.payer.address}`);
    for (const output of [run.stdout, run.stderr, JSON.stringify(run.report), run.junit, run.summary]) {
      expect(output).not.to.include(bareKey);
      expect(output).not.to.include(payerKey.slice(2));
      expect(output).not.to.include((chain as DevChain).rpcUrl);
    }
  });

  describe('payments', () => {
    const payments = ['--only', 'GW-4.x402,GW-8.x402,GW-3.x402,GW-7.x402,GW-1.tool-call'];

    it('without a payer: the 402 flow, free endpoints and price pass; what needs money does not apply', async function () {
      this.timeout(120_000);
      const run = await certify(urlsOf(enforcing), payments);
      expect(run.code, run.stderr).to.equal(0);
      const byStatus = (status: string) =>
        run.report.results.filter((result) => result.status === status).map((result) => result.id);
      expect(byStatus('pass')).to.have.members([
        'GW-4.x402-payment-required',
        'GW-4.x402-mcp-payment-required',
        'GW-4.x402-mcp-2026-payment-required',
        'GW-4.x402-verify-payment-required',
        'GW-4.x402-free-endpoints',
        'GW-8.x402-price',
      ]);
      expect(byStatus('not-applicable')).to.have.members([
        'GW-1.tool-call',
        'GW-3.x402-charge-exact',
        'GW-3.x402-mcp-2026-charge-exact',
        'GW-7.x402-no-charge-on-failure',
        'GW-3.x402-replay-refused',
      ]);
      expect(run.results['GW-3.x402-charge-exact']?.reason).to.match(/^no payer was given: lend the runner/);
      expect(run.results['GW-1.tool-call']?.reason).to.match(
        /^the deployment requires an x402 payment \(.*\); lend the runner/,
      );
    });

    it('fails the price against a gateway that charges nothing', async () => {
      const run = await certify(urlsOf(lenient), ['--only', 'GW-8.x402-price']);
      expect(run.code).to.equal(1);
      expect(run.results['GW-8.x402-price']?.reason).to.match(/says payments are off/);
    });
  });

  it('runs only what --only selects, less what --skip removes', async () => {
    const run = await certify(urlsOf(lenient), [
      '--only',
      'GW-4.health,RT-4.health,RT-2.jwks-hash-report-data',
      '--skip',
      'RT-4.health-security-posture,tee',
    ]);
    expect(run.code).to.equal(0);
    expect(run.report.results.map((result) => result.id)).to.deep.equal(['GW-4.health', 'RT-4.health']);
    expect(run.report.excluded.map((exclusion) => [exclusion.id, exclusion.excludedBy])).to.deep.equal([
      ['RT-4.health-security-posture', 'RT-4.health-security-posture'],
      ['RT-2.jwks-hash-report-data', 'tee'],
    ]);
    expect(run.stdout).to.include('-> excluded on request (--skip tee)');
    expect(run.report.target).to.deep.equal({
      runtime: lenient.runtimeUrl + '/',
      gateway: lenient.gatewayUrl + '/',
    });
    expect(run.results['GW-4.health']?.evidence[0]).to.deep.include({ kind: 'http' });
  });

  it('fails the requirements that need a TEE against tee-none, saying so', async () => {
    // --only repeated adds to the list (the issue 25 trial found the first one dropped).
    const run = await certify(urlsOf(lenient), ['--only', 'RT-4.attestation-summary', '--only', 'tee']);
    expect(run.code).to.equal(1);
    const needingTee = REQUIREMENTS.filter(
      (requirement) => 'groups' in requirement && requirement.groups?.includes('tee'),
    );
    expect(run.report.results.map((result) => [result.id, result.status])).to.have.deep.members([
      ...needingTee.map((requirement) => [requirement.id, 'fail']),
      ['RT-4.attestation-summary', 'pass'],
    ]);
    expect(run.results['RT-2.jwks-hash-report-data']?.reason).to.match(/^the runtime has no TEE: /);
  });

  describe('GW-5.erc8128-operator-enforced', () => {
    const only = ['--only', 'GW-5.erc8128-operator-enforced'];

    it('does not apply without an operator key, and says why', async () => {
      const run = await certify(urlsOf(enforcing), only);
      expect(run.code).to.equal(0);
      expect(run.results['GW-5.erc8128-operator-enforced']?.status).to.equal('not-applicable');
      const skipped = findAll(parseXml(run.junit), 'skipped')[0];
      expect(skipped?.attributes.message).to.match(/^no operator key given/);
      expect(run.summary).to.include('## Not applicable');
    });

    it('does not apply where the gateway does not enforce, unless the tester expects it to', async () => {
      const env = { SIGIL_CONFORMANCE_OPERATOR_KEY: operatorKey };
      const lenientRun = await certify(urlsOf(lenient), only, env);
      expect(lenientRun.code).to.equal(0);
      expect(lenientRun.results['GW-5.erc8128-operator-enforced']?.reason).to.include('does not enforce');
      const expecting = await certify(urlsOf(lenient), [...only, '--expect-operator-enforcement'], env);
      expect(expecting.code).to.equal(1);
      expect(expecting.results['GW-5.erc8128-operator-enforced']?.status).to.equal('fail');
    });

    it('fails with a clear reason when the key is not an operator’s', async () => {
      const run = await certify(urlsOf(enforcing), [...only, '--operator-key', generatePrivateKey()]);
      expect(run.code).to.equal(1);
      expect(run.results['GW-5.erc8128-operator-enforced']?.reason).to.match(
        /is not an operator of this gateway/,
      );
    });
  });

  describe('against servers that are not Sigil', () => {
    let servers: TinyServer[] = [];
    afterEach(async () => {
      await Promise.all(servers.map((server) => server.close()));
      servers = [];
    });
    const serve = async (handler: Parameters<typeof startTinyServer>[0]) => {
      const server = await startTinyServer(handler);
      servers.push(server);
      return server;
    };

    it('reports requirements whose feature the deployment lacks as not applicable', async () => {
      const server = await serve((request, response) =>
        request.url === '/health' ? sendJson(response, 200, { status: 'ok' }) : sendJson(response, 404, {}),
      );
      const run = await certify(bothAt(server), ['--only', 'RT-5,GW-5.session,GW-5.erc8128']);
      expect(run.code).to.equal(0);
      const statuses = new Set(run.report.results.map((result) => result.status));
      expect([...statuses]).to.deep.equal(['not-applicable']);
      expect(run.results['RT-5.siwe-verify']?.reason).to.match(/^the runtime exposes no wallet sign-in/);
      expect(run.results['GW-5.session']?.reason).to.match(/^the gateway exposes no session introspection/);
    });

    it('exits 1 when a MUST fails, with the reason in every report', async () => {
      const server = await serve((_request, response) => sendJson(response, 500, { code: 'internal' }));
      const run = await certify(bothAt(server), ['--only', 'GW-4.health']);
      expect(run.code).to.equal(1);
      const reason = 'GET /health on the gateway: expected HTTP 200, got 500: {"code":"internal"}';
      expect(run.results['GW-4.health']).to.include({ status: 'fail', reason });
      expect(findAll(parseXml(run.junit), 'failure')[0]?.attributes).to.include({
        message: reason,
        type: 'MUST',
      });
      expect(run.stdout).to.include('deployment conformance: FAIL');
      expect(run.summary).to.include('## Failures');
    });

    it('never shows a secret the deployment or the tester hands it', async () => {
      const canaries = await makeCanaries();
      const server = await serve((_request, response) => {
        response.setHeader('www-authenticate', `Bearer error="${canaries.jwt}"`);
        sendJson(response, 200, {
          status: 'ok',
          securityPosture: {},
          token: canaries.opaqueBearer,
          echo: `your token ${canaries.opaqueBearer}, wallet token ${canaries.walletToken}`,
          signed: `sig=:${canaries.httpSignature}: by ${canaries.walletSignature}`,
          keys: [canaries.privateKey, canaries.pemPrivateKey],
        });
      });
      const run = await certify(bothAt(server), ['--only', 'GW-4.health,RT-4.health'], {
        SIGIL_CONFORMANCE_OPERATOR_KEY: canaries.bareHexKey,
      });
      expect(run.code).to.equal(0);
      expect(JSON.stringify(run.results['GW-4.health']?.evidence)).to.include('your token [REDACTED]');
      for (const [name, text] of Object.entries({
        stdout: run.stdout,
        stderr: run.stderr,
        'report.json': JSON.stringify(run.report),
        'junit.xml': run.junit,
        'summary.md': run.summary,
      })) {
        expect(leakedIn(text, canaries), name).to.deep.equal([]);
      }
    });
  });

  describe('usage', () => {
    const urls = ['--runtime', 'http://127.0.0.1:8080', '--gateway', 'http://127.0.0.1:8402'];

    for (const [title, args, message] of [
      [
        'a URL that is not one',
        ['--runtime', 'localhost:8080', '--gateway', 'http://127.0.0.1:8402'],
        '--runtime must be',
      ],
      [
        'a URL with credentials',
        ['--runtime', 'http://u:p@127.0.0.1', '--gateway', 'http://127.0.0.1'],
        'without credentials',
      ],
      ['an unknown id in --only', [...urls, '--only', 'GW-5.nope'], 'no requirement matches GW-5.nope'],
      ['an unknown prefix in --skip', [...urls, '--skip', 'XX-1'], 'no requirement matches XX-1'],
      ['an operator key that is not one', [...urls, '--operator-key', 'deadbeef-secret'], '32-byte hex'],
      [
        'a payer key that is not one',
        [...urls, '--payer-key', 'deadbeef-secret'],
        '--payer-key must be a 32-byte',
      ],
      [
        'an RPC URL that is not one',
        [...urls, '--rpc-url', 'deadbeef-secret'],
        '--rpc-url must be an absolute',
      ],
      ['an unknown option', [...urls, '--bogus'], "unknown option '--bogus'"],
      ['a missing --gateway', ['--runtime', 'http://127.0.0.1:8080'], "required option '--gateway <url>'"],
    ] as const) {
      it(`exits 2 for ${title}`, async () => {
        const run = await runSigil(['conformance', 'deployment', ...args]);
        expect(run.code, run.stdout).to.equal(2);
        expect(run.stderr).to.include(message);
        expect(run.stderr).not.to.include('deadbeef-secret');
      });
    }

    it('prints help with exit 0 on every conformance subcommand', async () => {
      for (const command of [[], ['deployment'], ['plugin'], ['requirements']]) {
        const run = await runSigil(['conformance', ...command, '--help']);
        expect(run.code, command.join(' ')).to.equal(0);
        expect(run.stdout).to.match(new RegExp(`^Usage: sigil conformance ${command.join(' ')}`));
      }
    });

    it('lists every requirement id with `sigil conformance requirements`', async () => {
      const run = await runSigil(['conformance', 'requirements']);
      expect(run.code).to.equal(0);
      for (const requirement of REQUIREMENTS) expect(run.stdout).to.include(requirement.id);
      expect(run.stdout).to.match(/^RT-2\.jwks-hash-report-data +MUST +.* \[tee\]$/m);
    });
  });
});
