import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { AttestationEvidenceV2, TeeBackendV2 } from '@sigil/plugin-api';
import teeSevSnp from '../../../../attestation/sev-snp/index.ts';
import teeTdx from '../../../../attestation/tdx/index.ts';
import { parseTdxQuote } from '../../../../attestation/tdx/quote.ts';
import { evaluateTrust, type TrustInput } from '../../../../core/auth/delegation/trust.ts';
import { SecretRegistry } from '../../../../core/log.ts';
import * as snp from '../../../attestation/sev-snp/material.ts';
import * as tdx from '../../../attestation/tdx/evidence.ts';
import { sealedOnSwtpm, type SealedVtpm } from '../../../attestation/vtpm/on-swtpm.ts';
import { quietLogger } from '../../../support/kernel.ts';

/** REPORT_DATA as the runtime asks for it: the nonce, the JWKS hash's first 16 bytes, then 16 of its own. */
const runtimeReportData = (nonce: Uint8Array, jwksHash: Uint8Array, tail = Buffer.alloc(16)): Buffer =>
  Buffer.concat([nonce, jwksHash.subarray(0, 16), tail]);

/** A JWKS hash whose first 16 bytes (what REPORT_DATA[32:48] holds) are `bound`. */
const jwksHashBinding = (bound: Uint8Array): Buffer =>
  Buffer.concat([Buffer.from(bound), randomBytes(32 - bound.length)]);

const BINDS_BOTH = "binds the gateway's nonce at REPORT_DATA[0:32] and the served JWKS's hash at [32:48]";

/**
 * The gateway's judgement of a runtime, with the TEE backends' own verifiers (tee-backend v2
 * `verify`): recorded SEV-SNP and TDX reports, which cannot be made here, and vTPM quotes made now by
 * a swtpm.
 */
describe('evaluateTrust: the runtime’s trust from its evidence, by the backends’ verifiers', function () {
  this.timeout(180_000);

  describe('real SEV-SNP and TDX material (recorded; judged at a time inside its certificates’ validity)', () => {
    let snpBackend: TeeBackendV2;
    let tdxBackend: TeeBackendV2;
    const tdxEvidence = tdx.evidenceOf(tdx.QUOTE_V4, tdx.recordedCollateral());
    const tdxReportData = Buffer.from(parseTdxQuote(tdx.QUOTE_V4).td.reportData);
    before(async () => {
      snpBackend = (await teeSevSnp.create({
        config: teeSevSnp.config.parse({}),
        deps: { secrets: new SecretRegistry(), clock: { now: () => snp.AT } },
        logger: quietLogger(),
      })) as TeeBackendV2;
      tdxBackend = (await teeTdx.create({
        // verify() reads the collateral the evidence carries, never this directory.
        config: teeTdx.config.parse({ keyMaterial: 'k'.repeat(32), collateralDir: tdx.TDX_FIXTURES }),
        deps: { secrets: new SecretRegistry(), fetch: globalThis.fetch, clock: { now: () => tdx.V4_TIME } },
        logger: quietLogger(),
      })) as TeeBackendV2;
    });

    const judge = (
      evidence: AttestationEvidenceV2,
      now: Date,
      reportData: Buffer,
      change: Partial<TrustInput> = {},
    ) =>
      evaluateTrust({
        evidence,
        // The report's own nonce and JWKS hash: the state then hangs on the verification alone.
        nonce: reportData.subarray(0, 32),
        jwksHash: jwksHashBinding(reportData.subarray(32, 48)),
        verifiers: [snpBackend, tdxBackend],
        now,
        ...change,
      });

    it('SEV-SNP: degraded_no_attestation, naming the debug policy its report has, though REPORT_DATA matches', async () => {
      const trust = await judge(snp.REAL_EVIDENCE, snp.AT, snp.REPORT_DATA);
      expect(trust).to.include({ state: 'degraded_no_attestation', platform: 'sev-snp' });
      expect(trust.failedChecks).to.deep.equal(['debug']);
      expect(trust.reason).to.match(/^the sev-snp evidence does not verify: debug \(/);
      expect(trust.reason.endsWith(`; the report ${BINDS_BOTH}`), trust.reason).to.equal(true);
      expect(trust.checkedAt).to.equal(snp.AT);
    });

    it('TDX: degraded_no_attestation, naming the TCB status of its platform, though REPORT_DATA matches', async () => {
      const trust = await judge(tdxEvidence, tdx.V4_TIME, tdxReportData);
      expect(trust).to.include({ state: 'degraded_no_attestation', platform: 'tdx' });
      expect(trust.failedChecks).to.deep.equal(['tcb']);
      expect(trust.reason).to.match(/^the tdx evidence does not verify: tcb \(/);
      expect(trust.reason.endsWith(`; the report ${BINDS_BOTH}`), trust.reason).to.equal(true);
    });

    it('reads the nonce and the JWKS hash from the real REPORT_DATA: another nonce, another hash', async () => {
      for (const [evidence, now, reportData] of [
        [snp.REAL_EVIDENCE, snp.AT, snp.REPORT_DATA],
        [tdxEvidence, tdx.V4_TIME, tdxReportData],
      ] as const) {
        const served = randomBytes(32);
        const trust = await judge(evidence, now, reportData, { nonce: randomBytes(32), jwksHash: served });
        expect(trust.state).to.equal('degraded_no_attestation');
        expect(trust.reason).to.include(
          `binds another nonce than the gateway sent at REPORT_DATA[0:32] and JWKS hash ${reportData.subarray(32, 48).toString('hex')} at [32:48], not ${served.subarray(0, 16).toString('hex')} (the JWKS served)`,
        );
        expect(trust.jwksSha256).to.equal(served.toString('hex'));
      }
    });

    it('at a time outside the certificates’ validity, the chain fails too', async () => {
      const trust = await judge(snp.REAL_EVIDENCE, new Date('2035-01-01T00:00:00Z'), snp.REPORT_DATA);
      expect(trust.failedChecks).to.include('debug').and.to.have.length.greaterThan(1);
    });

    it('degraded_no_attestation without a backend of the evidence’s platform, or without evidence', async () => {
      const unverifiable = await judge(snp.REAL_EVIDENCE, snp.AT, snp.REPORT_DATA, {
        verifiers: [tdxBackend],
      });
      expect(unverifiable).to.include({ state: 'degraded_no_attestation', platform: 'sev-snp' });
      expect(unverifiable.reason).to.equal(
        "the gateway loads no sev-snp TEE backend, so it cannot verify the runtime's sev-snp evidence",
      );
      expect(unverifiable).to.not.have.property('failedChecks');
      const none = await judge(snp.REAL_EVIDENCE, snp.AT, snp.REPORT_DATA, { evidence: undefined });
      expect(none).to.include({ state: 'degraded_no_attestation', platform: 'none' });
    });
  });

  describe('vTPM quotes (swtpm)', () => {
    let vtpm: SealedVtpm;
    let backend: TeeBackendV2;
    let digestBackend: TeeBackendV2;
    const nonce = randomBytes(32);
    const jwksHash = randomBytes(32);
    const reportData = runtimeReportData(nonce, jwksHash);
    let evidence: AttestationEvidenceV2;
    before(async () => {
      vtpm = await sealedOnSwtpm();
      backend = await vtpm.create();
      // A TPM without SHA-512 binds SHA-256(REPORT_DATA): it cannot be read back from the quote.
      digestBackend = await vtpm.create({ qualifyingData: 'sha256' });
      evidence = (await backend.attest(reportData)) as AttestationEvidenceV2;
    });
    after(() => vtpm?.remove());

    const judge = (change: Partial<TrustInput> = {}) =>
      evaluateTrust({ evidence, nonce, jwksHash, verifiers: [backend], now: new Date(), ...change });

    it('trusted: the quote verifies and binds the nonce and the JWKS hash', async () => {
      const trust = await judge();
      expect(trust).to.include({
        state: 'trusted',
        platform: 'vtpm',
        reason: `the verified vtpm report ${BINDS_BOTH}`,
        jwksSha256: jwksHash.toString('hex'),
      });
      expect(trust).to.not.have.property('failedChecks');
    });

    it('trusted whatever REPORT_DATA[48:64] holds (where a provenance key hash goes)', async () => {
      const withTail = runtimeReportData(nonce, jwksHash, randomBytes(16));
      const trust = await judge({ evidence: (await backend.attest(withTail)) as AttestationEvidenceV2 });
      expect(trust.state).to.equal('trusted');
    });

    it('degraded_hash_mismatch: the quote verifies but binds another JWKS hash', async () => {
      const served = randomBytes(32);
      const trust = await judge({ jwksHash: served });
      expect(trust.state).to.equal('degraded_hash_mismatch');
      expect(trust.reason).to.equal(
        `the verified vtpm report binds the gateway's nonce at REPORT_DATA[0:32] and JWKS hash ${jwksHash.subarray(0, 16).toString('hex')} at [32:48], not ${served.subarray(0, 16).toString('hex')} (the JWKS served)`,
      );
    });

    it('degraded_no_attestation: a quote of another nonce (replayed), or one tampered with', async () => {
      const stale = await judge({ nonce: randomBytes(32) });
      expect(stale.state).to.equal('degraded_no_attestation');
      expect(stale.reason).to.match(/another nonce .* \(not fresh\)$/);
      const quote = Buffer.from(evidence.report, 'base64');
      quote[quote.length - 1] = (quote[quote.length - 1] as number) ^ 0x01;
      const tampered = await judge({ evidence: { ...evidence, report: quote.toString('base64') } });
      expect(tampered.state).to.equal('degraded_no_attestation');
      expect(tampered.failedChecks).to.include('signature');
    });

    it('reads a quote that binds SHA-256(REPORT_DATA) through the REPORT_DATA the runtime serves, which the verifier checks', async () => {
      const digested = (await digestBackend.attest(reportData)) as AttestationEvidenceV2;
      const judgeDigest = (change: Partial<TrustInput>) =>
        judge({ evidence: digested, verifiers: [digestBackend], ...change });
      expect((await judgeDigest({ reportData })).state).to.equal('trusted');
      const unreadable = await judgeDigest({});
      expect(unreadable.state).to.equal('degraded_no_attestation');
      expect(unreadable.reason).to.match(/gives 32 bytes of REPORT_DATA, not the 64/);
      // REPORT_DATA served with another JWKS hash than the quote binds: the verifier refuses it.
      const misstated = await judgeDigest({ reportData: runtimeReportData(nonce, randomBytes(32)) });
      expect(misstated.state).to.equal('degraded_no_attestation');
      expect(misstated.failedChecks).to.deep.equal(['report-data']);
    });
  });
});
