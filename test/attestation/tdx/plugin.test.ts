import { expect } from 'chai';
import { once } from 'node:events';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describeTeeBackendKitV2 } from '@sigil/plugin-api/kit';
import teeTdx from '../../../attestation/tdx/index.ts';
import { COLLATERAL_FILES, directorySource, pccsSource } from '../../../attestation/tdx/collateral.ts';
import { parseTdxQuote } from '../../../attestation/tdx/quote.ts';
import { SecretRegistry } from '../../../core/log.ts';
import { quietLogger } from '../../support/kernel.ts';
import { processTempDir } from '../../support/paths.ts';
import { rejectionOf } from '../../support/rejection.ts';
import { evidenceOf, QUOTE_V4, recordedCollateral, TDX_FIXTURES, V4_TIME } from './evidence.ts';

const KEY_MATERIAL = 'canary-tee-tdx-key-material-0123456789';

/** The recorded collateral as an operator would lay it out for `collateralDir` (the PCK CRL as PEM). */
function collateralDirectory(): string {
  const dir = join(processTempDir('tee-tdx'), 'collateral');
  mkdirSync(dir, { recursive: true });
  const from = (name: string) => join(TDX_FIXTURES, name);
  copyFileSync(from('sample_tcbInfo_response'), join(dir, COLLATERAL_FILES.tcbInfo));
  copyFileSync(from('sample_qeIdentity_response'), join(dir, COLLATERAL_FILES.qeIdentity));
  copyFileSync(from('tcb_signing_chain.pem'), join(dir, COLLATERAL_FILES.tcbInfoIssuerChain));
  copyFileSync(from('tcb_signing_chain.pem'), join(dir, COLLATERAL_FILES.qeIdentityIssuerChain));
  copyFileSync(from('rootcrl.der'), join(dir, COLLATERAL_FILES.rootCaCrl));
  const pem = recordedCollateral()
    .pckCrl!.match(/.{1,64}/g)!
    .join('\n');
  writeFileSync(
    join(dir, COLLATERAL_FILES.pckCrl),
    `-----BEGIN X509 CRL-----\n${pem}\n-----END X509 CRL-----\n`,
  );
  return dir;
}

/** A machine without TDX: a configfs-tsm path that does not exist. */
const NO_TSM = '/nonexistent/sigil-test/tsm/report';

function create(options: Record<string, unknown> = {}, secrets = new SecretRegistry()) {
  return teeTdx.create({
    config: teeTdx.config.parse({
      keyMaterial: KEY_MATERIAL,
      collateralDir: collateralDirectory(),
      tsmReportPath: NO_TSM,
      ...options,
    }),
    deps: { secrets, fetch: globalThis.fetch, clock: { now: () => new Date() } },
    logger: quietLogger(),
  });
}

describe('tee-tdx on a machine without TDX', () => {
  it('refuses to start, naming what it looked for', async () => {
    const error = await rejectionOf(Promise.resolve(create()).then((backend) => backend.start?.()));
    expect(error.code).to.equal('unavailable');
    expect(error.details).to.deep.equal({ reason: 'tee_unavailable', lookedFor: [NO_TSM, '/dev/tdx_guest'] });
    expect(error.message).to.equal(
      `tee-tdx: no Intel TDX here: ${NO_TSM} does not exist (configfs-tsm), nor does /dev/tdx_guest: this is no TDX guest`,
    );
  });

  it('refuses to start on a directory that is no configfs-tsm (no provider)', async () => {
    const notConfigfs = join(processTempDir('tee-tdx'), 'not-configfs');
    mkdirSync(notConfigfs, { recursive: true });
    const error = await rejectionOf(
      Promise.resolve(create({ tsmReportPath: notConfigfs })).then((backend) => backend.start?.()),
    );
    expect(error.details).to.include({ reason: 'tee_unavailable' });
    expect(error.message).to.match(new RegExp(`configfs-tsm at ${notConfigfs} gives no provider: ENOENT`));
  });

  it('says so in status(), attests nothing, and refuses report data that is not 64 bytes', async () => {
    const backend = await create();
    expect(await backend.status()).to.deep.equal({ teeEnabled: false, platform: 'tdx', keySource: 'config' });
    expect(await backend.attest(new Uint8Array(64))).to.equal(undefined);
    expect((await rejectionOf(backend.attest(new Uint8Array(63)))).code).to.equal('invalid_request');
  });

  it('derives keys from keyMaterial, the same in every process, and keeps the material out of logs', async () => {
    const secrets = new SecretRegistry();
    const [a, b] = [await create({}, secrets), await create()];
    const [keyA, keyB] = [await a.signingKey('execution-proof'), await b.signingKey('execution-proof')];
    expect(keyA.key).to.have.length(32);
    expect(Buffer.from(keyA.key).equals(Buffer.from(keyB.key))).to.equal(true);
    expect(Buffer.from(keyA.key).equals(Buffer.from((await a.signingKey('other')).key))).to.equal(false);
    expect(keyA.source).to.equal('config');
    expect(secrets.scrub(`leaked ${KEY_MATERIAL}`)).to.equal('leaked [REDACTED]');
  });

  it('verifies TDX evidence offline, and refuses evidence of other platforms', async () => {
    const backend = await create();
    const result = await backend.verify(evidenceOf(QUOTE_V4, recordedCollateral()), { at: V4_TIME });
    expect(result.checks.filter((check) => !check.ok).map((check) => check.id)).to.deep.equal(['tcb']);
    const other = await rejectionOf(
      backend.verify({ platform: 'sev-snp', report: 'AAAA', certificates: [] }),
    );
    expect(other.code).to.equal('invalid_request');
    expect(other.details).to.deep.equal({ reason: 'platform_mismatch' });
  });

  it('refuses a config with both or neither collateral source, and TCB statuses that never pass', () => {
    const base = { keyMaterial: KEY_MATERIAL };
    expect(teeTdx.config.safeParse(base).success).to.equal(false);
    expect(
      teeTdx.config.safeParse({ ...base, collateralDir: '/x', pccsUrl: 'https://pccs.example' }).success,
    ).to.equal(false);
    expect(
      teeTdx.config.safeParse({ ...base, collateralDir: '/x', acceptedTcbStatuses: ['OutOfDate'] }).success,
    ).to.equal(false);
    expect(teeTdx.config.safeParse({ ...base, pccsUrl: 'https://pccs.example' }).success).to.equal(true);
  });
});

describe('tee-tdx kit, instance created without hardware (start() would refuse)', () => {
  describeTeeBackendKitV2(async () => create(), {
    expectNotApplicable: [
      'tee-backend.none-reports-no-tee',
      'tee-backend.none-keys-not-sealed',
      'tee-backend.none-attest-undefined',
      'tee-backend.attest-evidence',
      'tee-backend.attest-fresh',
      'tee-backend.verify-own-evidence',
      'tee-backend.verify-report-data',
      'tee-backend.verify-flipped-bit',
    ],
  });
});

describe('tee-tdx collateral, attached at attest time', () => {
  const quote = parseTdxQuote(QUOTE_V4);

  it('reads a directory of PCS responses (CRLs as DER or PEM) into the collateral the verifier takes', async () => {
    expect(await directorySource(collateralDirectory()).collateralFor(quote)).to.deep.equal(
      recordedCollateral(),
    );
  });

  it('names the file a directory lacks', async () => {
    const error = await rejectionOf(
      directorySource(join(processTempDir('tee-tdx'), 'empty')).collateralFor(quote),
    );
    expect(error.code).to.equal('unavailable');
    expect(error.details).to.deep.equal({ reason: 'collateral_unavailable' });
    expect(error.message).to.match(/cannot read .*empty\/tcbInfo\.json/);
  });

  describe('from a PCCS (a local server answering Intel PCS v4 paths with the recorded responses)', () => {
    let server: Server;
    let base: string;
    const requests: string[] = [];
    let failWith: number | undefined;
    const chainHeader = encodeURIComponent(recordedCollateral().tcbInfoIssuerChain!);
    const routes: Record<string, { file: string; headers?: Record<string, string> }> = {
      '/tdx/certification/v4/tcb?fmspc=50806f000000': {
        file: 'sample_tcbInfo_response',
        headers: { 'TCB-Info-Issuer-Chain': chainHeader },
      },
      '/tdx/certification/v4/qe/identity': {
        file: 'sample_qeIdentity_response',
        headers: { 'SGX-Enclave-Identity-Issuer-Chain': chainHeader },
      },
      '/sgx/certification/v4/pckcrl?ca=platform&encoding=der': { file: 'pckcrl' },
      '/IntelSGXRootCA.der': { file: 'rootcrl.der' },
    };

    before(async () => {
      server = createServer((request, response) => {
        requests.push(request.url ?? '');
        const route = routes[request.url ?? ''];
        if (failWith !== undefined || route === undefined) return response.writeHead(failWith ?? 404).end();
        response.writeHead(200, route.headers).end(readFileSync(join(TDX_FIXTURES, route.file)));
      });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    after(() => server.close());
    beforeEach(() => {
      requests.length = 0;
      failWith = undefined;
    });

    const source = (clock: { now(): Date }) =>
      pccsSource({
        url: `${base}/sgx/certification/v4/`,
        rootCaCrlUrl: `${base}/IntelSGXRootCA.der`,
        fetch: globalThis.fetch,
        clock,
      });

    it('asks for the quote’s FMSPC and PCK CA, and gets what the directory holds', async () => {
      const collateral = await source({ now: () => V4_TIME }).collateralFor(quote);
      expect(collateral).to.deep.equal(recordedCollateral());
      expect([...requests].sort()).to.deep.equal(Object.keys(routes).sort());
    });

    it('keeps the collateral until its earliest next update, then asks again', async () => {
      let now = V4_TIME;
      const pccs = source({ now: () => now });
      await pccs.collateralFor(quote);
      await pccs.collateralFor(quote);
      expect(requests).to.have.length(4);
      now = new Date('2023-07-08T07:25:00Z'); // the QE identity's next update has passed
      await pccs.collateralFor(quote);
      expect(requests).to.have.length(8);
    });

    it('fails attest-time collection as unavailable when the PCCS fails', async () => {
      failWith = 503;
      const error = await rejectionOf(source({ now: () => V4_TIME }).collateralFor(quote));
      expect(error.code).to.equal('unavailable');
      expect(error.message).to.match(/answered 503$/);
    });
  });
});
