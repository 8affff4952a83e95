import { expect } from 'chai';
import type { AttestationEvidenceV2, TeeBackendV2 } from '@sigil/plugin-api';
import teeSevSnp from '../../../../attestation/sev-snp/index.ts';
import teeTdx from '../../../../attestation/tdx/index.ts';
import { SecretRegistry } from '../../../../core/log.ts';
import { buildInfo } from '../../../../services/shared/build-info.ts';
import { offlineVerification } from '../../../../services/shared/offline-verification/script.ts';
import { BUNDLE_FORMAT } from '../../../../services/shared/offline-verification/verify-bundle.ts';
import { signedProvenance } from '../../../../services/shared/provenance.ts';
import { AT as SNP_TIME, REAL_EVIDENCE as SNP_EVIDENCE } from '../../../attestation/sev-snp/material.ts';
import { evidenceOf, QUOTE_V4, recordedCollateral, V4_TIME } from '../../../attestation/tdx/evidence.ts';
import { quietLogger } from '../../../support/kernel.ts';
import { BundleFolder, type ScriptRun } from './support.ts';

/**
 * The bundle script's platform verifiers on real hardware evidence: the recorded SEV-SNP report and
 * TDX quote (test/fixtures/attestation), in a bundle-like document around them, judged at the time
 * they were recorded. The script says what the backend's own verify() says, check by check; each
 * fails only its known check (the SNP report is a debug guest's, the TDX platform's TCB is out of
 * date) and, as a recorded report cannot bind this process's provenance key, provenance-key.
 */

const unstarted = {
  'sev-snp': () =>
    teeSevSnp.create({
      config: teeSevSnp.config.parse({}),
      deps: { secrets: new SecretRegistry(), clock: { now: () => SNP_TIME } },
      logger: quietLogger(),
    }),
  tdx: () =>
    teeTdx.create({
      config: teeTdx.config.parse({
        keyMaterial: 'recorded-evidence-test-key-material-0123456789',
        tsmReportPath: '/nonexistent/sigil-test/tsm/report',
        // Never asked: nothing is attested here, only verified.
        pccsUrl: 'https://pccs.invalid/',
      }),
      deps: { secrets: new SecretRegistry(), fetch: globalThis.fetch, clock: { now: () => V4_TIME } },
      logger: quietLogger(),
    }),
};

const RECORDED = [
  { platform: 'sev-snp', evidence: SNP_EVIDENCE, at: SNP_TIME, knownFailure: 'debug' },
  { platform: 'tdx', evidence: evidenceOf(QUOTE_V4, recordedCollateral()), at: V4_TIME, knownFailure: 'tcb' },
] as const;

/** A gateway's bundle around recorded evidence: REPORT_DATA's nonce and identity parts as recorded. */
async function bundleAround(backend: TeeBackendV2, evidence: AttestationEvidenceV2, at: Date) {
  const { claims } = await backend.verify(evidence, { at });
  const reportData = claims?.reportData ?? '';
  expect(reportData).to.match(/^[0-9a-f]{128}$/);
  return {
    format: BUNDLE_FORMAT,
    service: 'gateway',
    createdAt: at.toISOString(),
    report: {
      teeEnabled: true,
      platform: evidence.platform,
      nonce: reportData.slice(0, 64),
      reportData,
      evidence,
    },
    expected: { reportData },
    proofKeyFingerprint: `${reportData.slice(64, 96)}${'00'.repeat(16)}`,
    buildInfo: buildInfo(),
    provenance: await signedProvenance(backend, buildInfo()),
    offlineVerification: await offlineVerification(backend),
  };
}

describe('the bundle script on recorded SEV-SNP and TDX evidence', function () {
  this.timeout(120_000);

  for (const { platform, evidence, at, knownFailure } of RECORDED) {
    it(`${platform}: prints what the backend's verify() finds, failing only ${knownFailure} (and provenance-key)`, async () => {
      const backend = (await unstarted[platform]()) as TeeBackendV2;
      const bundle = await bundleAround(backend, evidence, at);
      const folder = new BundleFolder(JSON.stringify(bundle));
      let run: ScriptRun;
      try {
        run = folder.run(['bundle.json', '--at', at.toISOString()]);
      } finally {
        folder.remove();
      }
      const direct = await backend.verify(evidence, {
        reportData: Buffer.from(bundle.expected.reportData, 'hex'),
        at,
      });
      const printed = run.output.split('\n').filter((line) => / evidence\./.test(line));
      expect(printed).to.deep.equal(
        direct.checks.map((check) => `${check.ok ? 'PASS' : 'FAIL'} evidence.${check.id} ${check.detail}`),
      );
      expect(run.failed).to.deep.equal([`evidence.${knownFailure}`, 'provenance-key']);
      expect(run.passed).to.include.members(['evidence.signature', 'evidence.report-data', 'nonce']);
      expect(run.status, run.output).to.equal(1);
    });
  }

  it('judges at the time asked: the recorded SNP chain after its VCEK expired fails validity too', async () => {
    const backend = (await unstarted['sev-snp']()) as TeeBackendV2;
    const folder = new BundleFolder(JSON.stringify(await bundleAround(backend, SNP_EVIDENCE, SNP_TIME)));
    try {
      const run = folder.run(['bundle.json', '--at', '2030-01-01T00:00:00Z']);
      expect(run.failed).to.deep.equal(['evidence.validity', 'evidence.debug', 'provenance-key']);
    } finally {
      folder.remove();
    }
  });

  it('refuses a command it cannot run with the usage and exit 2: no file, two files, a time that is none, a file that is not there', async () => {
    const backend = (await unstarted['sev-snp']()) as TeeBackendV2;
    const folder = new BundleFolder(JSON.stringify(await bundleAround(backend, SNP_EVIDENCE, SNP_TIME)));
    try {
      for (const args of [[], ['bundle.json', 'bundle.json'], ['bundle.json', '--at', 'yesterday']]) {
        const run = folder.run(args);
        expect(run.status, args.join(' ')).to.equal(2);
        expect(run.output).to.contain('usage: node verify-bundle.cjs <bundle.json> [--at <ISO time>]');
        expect(run.passed.length + run.failed.length).to.equal(0);
      }
      const missing = folder.run(['elsewhere.json']);
      expect(missing.status).to.equal(2);
      expect(missing.output).to.contain('elsewhere.json cannot be read (ENOENT)');
      expect(missing.passed.length + missing.failed.length).to.equal(0);
    } finally {
      folder.remove();
    }
  });
});
