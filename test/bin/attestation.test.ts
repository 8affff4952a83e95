import { createHash, randomBytes, X509Certificate } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { AttestationEvidenceV2, EvidenceVerification, TeeBackendV2 } from '@sigil/plugin-api';
import { pemBlocks } from '../../attestation/sev-snp/certificates.ts';
import { describeAk } from '../../attestation/vtpm/verify.ts';
import { attestationBundle, attestationReport } from '../../services/shared/attestation.ts';
import { attestedRuntimeOver } from '../support/attested-service.ts';
import { systemClock } from '../../core/clock.ts';
import {
  ARK_GUID,
  ASK_GUID,
  AT,
  certificateTable,
  fixture,
  flipBit,
  forgeMilanChain,
  MEASUREMENT,
  MILAN_CHAIN,
  REPORT,
  REPORT_DATA,
  resign,
  VCEK,
  VCEK_GUID,
} from '../attestation/sev-snp/material.ts';
import {
  evidenceOf,
  QUOTE_V4,
  recordedCollateral,
  TD_REPORT,
  TDX_FIXTURES,
  V4_TIME,
} from '../attestation/tdx/evidence.ts';
import { sealedOnSwtpm, type SealedVtpm } from '../attestation/vtpm/on-swtpm.ts';
import { runSigil } from '../support/cli.ts';
import { processTempDir } from '../support/paths.ts';

/** What `--json` prints. */
interface Printed extends EvidenceVerification {
  files: { path: string; as: string }[];
  at: string;
}

const failedChecks = (printed: Printed) =>
  printed.checks.filter((check) => !check.ok).map((check) => check.id);

/** A TDX quote's header precedes its TD report. */
const QUOTE_HEADER_BYTES = 48;

describe('sigil attestation verify', function () {
  this.timeout(180_000);
  const dir = processTempDir('attestation-verify');

  /** Writes `content` to a file of the test's folder; its path. */
  const file = (name: string, content: string | Uint8Array) => {
    const path = join(dir, name);
    writeFileSync(path, content);
    return path;
  };
  const verify = (...args: string[]) => runSigil(['attestation', 'verify', ...args], { cwd: dir });
  /** Runs the command with --json: its exit code and what it printed. */
  const verifyJson = async (...args: string[]) => {
    const result = await verify(...args, '--json');
    expect(result.stderr, result.stderr).to.equal('');
    return { code: result.code, printed: JSON.parse(result.stdout) as Printed };
  };

  describe('SEV-SNP: the real Milan report, its VCEK and AMD chain', () => {
    const snpAt = ['--at', AT.toISOString()];

    it('verifies the binary report with its VCEK (DER) and ASK/ARK (PEM): every check passes but debug (exit 1)', async () => {
      const result = await verify(
        file('report.bin', REPORT),
        file('vcek.der', fixture('vcek.testcer')),
        file('milan.pem', MILAN_CHAIN),
        ...snpAt,
      );
      expect(result.code, result.stderr).to.equal(1);
      expect(result.stdout).to.match(/^sev-snp evidence, judged at 2023-06-01T00:00:00\.000Z:$/m);
      expect(result.stdout).to.match(/report\.bin\s+SEV-SNP report$/m);
      expect(result.stdout).to.match(/milan\.pem\s+certificates: SEV-Milan, ARK-Milan$/m);
      expect(result.stdout).to.match(/^PASS {2}signature\s+ECDSA P-384 signature/m);
      expect(result.stdout).to.match(/^PASS {2}chain\s+SEV-VCEK ← SEV-Milan ← ARK-Milan/m);
      expect(result.stdout).to.match(/^FAIL {2}debug\s+the guest policy allows debugging/m);
      expect(result.stdout).to.match(new RegExp(`^ {2}measurement\\s+${MEASUREMENT}$`, 'm'));
      expect(result.stdout).to.match(/^not verified: 1 of \d+ checks failed \(debug\)$/m);
    });

    it('reads the report as hex text and the certificates in any order, and checks REPORT_DATA and the measurement expected', async () => {
      const hex = REPORT.toString('hex').replace(/.{60}/g, '$&\n');
      const { code, printed } = await verifyJson(
        file('milan-chain.pem', MILAN_CHAIN),
        file('report.hex', hex),
        file('vcek.pem', VCEK),
        ...snpAt,
        '--report-data',
        REPORT_DATA.toString('hex'),
        '--measurement',
        `measurement=${MEASUREMENT}`,
      );
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['debug']);
      expect(
        printed.checks.filter((check) => ['report-data', 'measurement'].includes(check.id)),
      ).to.have.length(2);
      expect(printed.files.map((taken) => taken.as)).to.deep.equal([
        'SEV-SNP report',
        'certificates: SEV-Milan, ARK-Milan',
        'certificate: SEV-VCEK',
      ]);
      expect(printed.claims?.measurements).to.deep.equal({ measurement: MEASUREMENT });
    });

    it("reads the certificates from the extended report's certificate table (configfs-tsm's auxblob)", async () => {
      const [ask, ark] = pemBlocks([MILAN_CHAIN]).map((pem) => new X509Certificate(pem).raw);
      const table = certificateTable([
        [ARK_GUID, ark as Buffer],
        [VCEK_GUID, fixture('vcek.testcer')],
        [ASK_GUID, ask as Buffer],
      ]);
      const { code, printed } = await verifyJson(
        file('report.bin', REPORT),
        file('auxblob', table),
        ...snpAt,
      );
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['debug']);
      expect(printed.files[1]?.as).to.equal(
        'certificate table, certificates: SEV-VCEK, SEV-Milan, ARK-Milan',
      );
    });

    it('refuses another REPORT_DATA than the one expected', async () => {
      const { code, printed } = await verifyJson(
        file('report.bin', REPORT),
        file('vcek.pem', VCEK),
        ...snpAt,
        '--report-data',
        randomBytes(64).toString('hex'),
      );
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['debug', 'report-data']);
    });

    it('refuses the report with one bit flipped in its measurement, and with one flipped in its signature', async () => {
      for (const offset of [0x90, 0x2a0]) {
        const { code, printed } = await verifyJson(
          file('flipped.bin', flipBit(REPORT, offset)),
          file('vcek.pem', VCEK),
          file('milan.pem', MILAN_CHAIN),
          ...snpAt,
        );
        expect(code, `bit flipped at ${offset}`).to.equal(1);
        expect(failedChecks(printed), `bit flipped at ${offset}`).to.deep.equal(['signature', 'debug']);
      }
    });

    it('refuses a self-signed chain that looks like AMD’s, the report re-signed with its VCEK', async () => {
      const forged = forgeMilanChain();
      const { code, printed } = await verifyJson(
        file('forged.bin', resign(REPORT, forged.vcek.keys.privateKey)),
        file('forged-vcek.pem', forged.vcek.pem),
        file('forged-chain.pem', forged.ask.pem + forged.ark.pem),
        ...snpAt,
      );
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['chain', 'debug']);
      expect(printed.checks.find((check) => check.id === 'chain')?.detail).to.match(
        /not one of AMD's ARKs shipped with the plugin/,
      );
    });

    it('refuses the real VCEK with another product’s chain (Genoa’s ASK and ARK)', async () => {
      const { code, printed } = await verifyJson(
        file('report.bin', REPORT),
        file('vcek.pem', VCEK),
        file('genoa.pem', fixture('ask_ark_genoa.pem')),
        ...snpAt,
      );
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['chain', 'debug']);
      expect(printed.checks.find((check) => check.id === 'chain')?.detail).to.equal(
        'SEV-VCEK is not signed by SEV-Genoa',
      );
    });

    it('takes a file it cannot recognise as the report with --platform, for the verifier to refuse (exit 1, not 2)', async () => {
      const truncated = file('truncated.bin', REPORT.subarray(0, 1000));
      const detected = await verify(truncated, '--at', AT.toISOString());
      expect(detected.code).to.equal(2);
      const forced = await verifyJson(truncated, '--platform', 'sev-snp', ...snpAt);
      expect(forced.code).to.equal(1);
      expect(forced.printed.checks).to.deep.equal([
        { id: 'report', ok: false, detail: 'a report is 1184 bytes, this one 1000' },
      ]);
    });
  });

  describe('TDX: the real v4 quote and its recorded collateral', () => {
    const tdxFile = (name: string) => join(TDX_FIXTURES, name);
    const COLLATERAL_FILES = [
      'pckcrl',
      'rootcrl.der',
      'sample_tcbInfo_response',
      'sample_qeIdentity_response',
      'tcb_signing_chain.pem',
    ].map(tdxFile);

    it('verifies the quote with its collateral as files: every check passes but tcb (exit 1), with REPORT_DATA and MRTD as expected', async () => {
      const tdReport = QUOTE_V4.subarray(QUOTE_HEADER_BYTES);
      const { code, printed } = await verifyJson(
        tdxFile('tdx_prod_quote_SPR_E4.dat'),
        ...COLLATERAL_FILES,
        '--at',
        V4_TIME.toISOString(),
        '--report-data',
        tdReport.subarray(TD_REPORT.reportData, TD_REPORT.reportData + 64).toString('hex'),
        '--measurement',
        `mrtd=${tdReport.subarray(TD_REPORT.mrTd, TD_REPORT.mrTd + 48).toString('hex')}`,
      );
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['tcb']);
      for (const id of [
        'signature',
        'chain',
        'qe-report',
        'revocation',
        'tcb-info',
        'qe-identity',
        'report-data',
        'measurement.mrtd',
      ])
        expect(printed.checks.find((check) => check.id === id)?.ok, id).to.equal(true);
      expect(
        Object.fromEntries(printed.files.map((taken) => [taken.path.split('/').pop(), taken.as])),
      ).to.deep.include({
        pckcrl: 'PCK CRL',
        'rootcrl.der': 'root CA CRL',
        sample_tcbInfo_response: 'TCB info (FMSPC 50806f000000)',
      });
    });

    it('verifies the same evidence given as JSON, as the services serve it', async () => {
      const { code, printed } = await verifyJson(
        file('tdx-evidence.json', JSON.stringify(evidenceOf(QUOTE_V4, recordedCollateral()))),
        '--at',
        V4_TIME.toISOString(),
      );
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['tcb']);
      expect(printed.files).to.deep.equal([
        { path: join(dir, 'tdx-evidence.json'), as: 'attestation evidence (JSON), tdx' },
      ]);
    });
  });

  describe('TPM: a quote made on swtpm by tee-vtpm', () => {
    let vtpm: SealedVtpm;
    let backend: TeeBackendV2;
    let evidence: AttestationEvidenceV2;
    const reportData = randomBytes(64);
    const QUOTED = [0, 7, 16];
    /** PCR 16's value after one extend of a zero PCR with `ab…ab`. */
    const PCR16 = createHash('sha256')
      .update(Buffer.alloc(32))
      .update(Buffer.from('ab'.repeat(32), 'hex'))
      .digest('hex');

    /** The files tpm2_quote and tpm2_readpublic write: message, signature, PCR values (-F values), AK public. */
    const quoteFiles = (pcrValues: Buffer) => {
      const collateral = evidence.collateral ?? {};
      return [
        file('quote.sig', Buffer.from(collateral.signature ?? '', 'base64')),
        file('quote.pcrs', pcrValues),
        file('quote.msg', Buffer.from(evidence.report, 'base64')),
        file('ak.pub', Buffer.from(collateral.akPublic ?? '', 'base64')),
      ];
    };
    const pcrValues = () => {
      const { sha256 } = JSON.parse(evidence.collateral?.pcrs ?? '{}') as { sha256: Record<string, string> };
      return Buffer.concat(QUOTED.map((pcr) => Buffer.from(sha256[String(pcr)] ?? '', 'hex')));
    };

    before(async () => {
      vtpm = await sealedOnSwtpm();
      vtpm.swtpm.extendPcr(16);
      backend = await vtpm.create({ quotePcrs: QUOTED });
      evidence = (await backend.attest(reportData)) as AttestationEvidenceV2;
    });
    after(() => vtpm?.remove());

    it('verifies the quote from its files, the AK pinned, REPORT_DATA and a PCR as expected: every check passes (exit 0)', async () => {
      const ak = describeAk(Buffer.from(evidence.collateral?.akPublic ?? '', 'base64'));
      const result = await verify(
        ...quoteFiles(pcrValues()),
        '--report-data',
        reportData.toString('hex'),
        '--measurement',
        `pcr16=${PCR16}`,
        '--trusted-ak',
        ak.fingerprint,
      );
      expect(result.code, result.stdout + result.stderr).to.equal(0);
      expect(result.stdout).to.match(/quote\.msg\s+TPM quote \(TPMS_ATTEST\)$/m);
      expect(result.stdout).to.match(/quote\.pcrs\s+sha256 values of PCR 0,7,16$/m);
      expect(result.stdout).to.match(/^PASS {2}ak-trusted\s+AK [0-9a-f]{64} is a pinned one$/m);
      expect(result.stdout).to.match(/^PASS {2}report-data\s/m);
      expect(result.stdout).to.match(/^PASS {2}measurement\s+pcr16 \(sha256\) is the expected value$/m);
      expect(result.stdout).to.match(/^verified: all \d+ checks passed$/m);
    });

    it('refuses the quote with one PCR value changed', async () => {
      const changed = pcrValues();
      changed[32] = (changed[32] as number) ^ 1;
      const { code, printed } = await verifyJson(...quoteFiles(changed));
      expect(code).to.equal(1);
      expect(failedChecks(printed)).to.deep.equal(['pcr-digest']);
    });

    it('verifies the body of GET /api/attestation/report, its REPORT_DATA binding the nonce and the JWKS hash', async () => {
      const served = await attestationReport(attestedRuntimeOver(backend), randomBytes(32));
      const body = file('report.json', JSON.stringify(served));
      const { code, printed } = await verifyJson(body, '--report-data', served.reportData);
      expect(code).to.equal(0);
      expect(printed.files).to.deep.equal([
        { path: body, as: 'attestation report (GET /api/attestation/report), vtpm' },
      ]);
      expect(printed.checks.find((check) => check.id === 'report-data')?.ok).to.equal(true);
      const other = await verifyJson(body, '--report-data', randomBytes(64).toString('hex'));
      expect(other.code).to.equal(1);
      expect(failedChecks(other.printed)).to.deep.equal(['report-data']);
    });

    it('verifies a bundle of GET /api/attestation/bundle as its own script does, and names what a tampered one fails', async () => {
      const bundle = await attestationBundle(attestedRuntimeOver(backend), randomBytes(32), systemClock);
      const { code, printed } = await verifyJson(file('bundle.json', JSON.stringify(bundle)));
      expect(code, JSON.stringify(printed.checks)).to.equal(0);
      expect(printed.checks.map((check) => check.id)).to.include.members([
        'evidence.signature',
        'nonce',
        'jwks-hash',
        'provenance-key',
        'provenance-signature',
        'code-hash',
      ]);
      const tampered = { ...bundle, jwks: { keys: [{ kty: 'EC' }] } };
      const refused = await verifyJson(file('tampered.json', JSON.stringify(tampered)));
      expect(refused.code).to.equal(1);
      expect(failedChecks(refused.printed)).to.deep.equal(['jwks-hash']);
      const alone = await verify(file('bundle.json', JSON.stringify(bundle)), file('notes.txt', 'x'));
      expect(alone.code).to.equal(2);
      expect(alone.stderr).to.include('a bundle that holds everything it is verified with');
    });
  });

  describe('input it cannot use: exit 2, naming the file', () => {
    it('refuses a file of no kind it reads, a file that does not go with the evidence, and a file it cannot read', async () => {
      const unknown = await verify(file('notes.txt', 'not evidence'));
      expect(unknown.code).to.equal(2);
      expect(unknown.stderr).to.include(`${join(dir, 'notes.txt')}: not a report, quote or evidence`);

      const stray = await verify(file('report.bin', REPORT), file('notes.txt', 'not a certificate'));
      expect(stray.code).to.equal(2);
      expect(stray.stderr).to.include(
        `${join(dir, 'notes.txt')}: not a file that goes with a SEV-SNP report`,
      );

      const missing = await verify(join(dir, 'missing.bin'));
      expect(missing.code).to.equal(2);
      expect(missing.stderr).to.include(`${join(dir, 'missing.bin')}: cannot be read (ENOENT)`);
    });
  });
});
