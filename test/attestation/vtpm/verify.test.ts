import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import type { AttestationEvidenceV2, EvidenceVerification, TeeBackendV2 } from '@sigil/plugin-api';
import { describeAk, verifyVtpmEvidence } from '../../../attestation/vtpm/verify.ts';
import { repoPath } from '../../support/paths.ts';
import { rejectionOf } from '../../support/rejection.ts';
import { sealedOnSwtpm, type SealedVtpm } from './on-swtpm.ts';

const failed = (result: EvidenceVerification) =>
  result.checks.filter((check) => !check.ok).map((check) => check.id);
const detailOf = (result: EvidenceVerification, id: string) =>
  result.checks.find((check) => check.id === id)?.detail ?? '';

/** `base64` with one bit flipped at byte `at` (counted from the end when negative). */
function flipBit(base64: string, at: number): string {
  const bytes = Buffer.from(base64, 'base64');
  const index = at < 0 ? bytes.length + at : at;
  bytes[index] = (bytes[index] as number) ^ 0x01;
  return bytes.toString('base64');
}

/** Offset of extraData's bytes in a quote's TPMS_ATTEST: after magic, type and qualifiedSigner. */
function extraDataOffset(report: string): number {
  const bytes = Buffer.from(report, 'base64');
  return 4 + 2 + 2 + bytes.readUInt16BE(6) + 2;
}

const pcrsOf = (evidence: AttestationEvidenceV2) =>
  JSON.parse(evidence.collateral?.pcrs ?? '{}') as { sha256: Record<string, string> };

const withCollateral = (
  evidence: AttestationEvidenceV2,
  change: Record<string, string>,
): AttestationEvidenceV2 => ({
  ...evidence,
  collateral: { ...evidence.collateral, ...change },
});

describe('tee-vtpm quotes, verified in TypeScript', function () {
  this.timeout(180_000);
  let vtpm: SealedVtpm;
  let other: SealedVtpm;
  let backend: TeeBackendV2;
  let reportData: Uint8Array;
  let evidence: AttestationEvidenceV2;
  let akFingerprint: string;

  before(async () => {
    [vtpm, other] = [await sealedOnSwtpm(), await sealedOnSwtpm()];
    backend = await vtpm.create();
    reportData = new Uint8Array(randomBytes(64));
    evidence = (await backend.attest(reportData)) as AttestationEvidenceV2;
    akFingerprint = describeAk(Buffer.from(evidence.collateral?.akPublic ?? '', 'base64')).fingerprint;
  });
  after(async () => {
    await vtpm?.remove();
    await other?.remove();
  });

  it('verifies a fresh quote: signature, AK, signer, PCR digest, REPORT_DATA and the PCRs expected, and reads its claims', async () => {
    const result = await backend.verify(evidence, {
      reportData,
      measurements: { pcr0: '00'.repeat(32), pcr7: '00'.repeat(32), pcr17: 'ff'.repeat(32) },
    });
    expect(failed(result)).to.deep.equal([]);
    expect(result.verified).to.equal(true);
    expect(result.checks.map((check) => check.id)).to.include.members([
      'report',
      'ak',
      'signature',
      'signer',
      'ak-trusted',
      'pcr-digest',
      'report-data',
      'measurement',
    ]);
    expect(detailOf(result, 'ak-trusted')).to.match(/taken on first use/);
    expect(result.claims?.reportData).to.equal(Buffer.from(reportData).toString('hex'));
    expect(Object.keys(result.claims?.measurements ?? {})).to.have.length(24);
    expect(result.claims?.details).to.deep.include({
      akFingerprint,
      pcrBank: 'sha256',
      reportDataBinding: 'report-data',
    });
    expect(result.claims?.details?.firmwareVersion).to.match(/^0x[0-9a-f]{16}$/);
    expect(evidence.certificates).to.deep.equal([]);
  });

  it('refuses a report with one bit flipped in its qualifying data: the signature fails, and REPORT_DATA', async () => {
    const tampered = { ...evidence, report: flipBit(evidence.report, extraDataOffset(evidence.report)) };
    const result = await backend.verify(tampered, { reportData });
    expect(failed(result)).to.deep.equal(['signature', 'report-data']);
  });

  it('refuses a report with one bit flipped in its PCR digest: the signature fails, and the digest', async () => {
    const result = await backend.verify(
      { ...evidence, report: flipBit(evidence.report, -1) },
      { reportData },
    );
    expect(failed(result)).to.deep.equal(['signature', 'pcr-digest']);
  });

  it('refuses a report whose magic is not TPM_GENERATED_VALUE, or with bytes after its end', async () => {
    const magic = await backend.verify({ ...evidence, report: flipBit(evidence.report, 0) }, { reportData });
    expect(failed(magic)).to.deep.equal(['report']);
    expect(detailOf(magic, 'report')).to.match(/TPM_GENERATED_VALUE/);
    expect(magic.claims).to.equal(undefined);
    const longer = Buffer.concat([Buffer.from(evidence.report, 'base64'), Buffer.from([0])]).toString(
      'base64',
    );
    const trailing = await backend.verify({ ...evidence, report: longer }, { reportData });
    expect(detailOf(trailing, 'report')).to.match(/1 bytes after its end/);
  });

  it('refuses a signature with one bit flipped', async () => {
    const tampered = withCollateral(evidence, {
      signature: flipBit(evidence.collateral?.signature ?? '', -1),
    });
    const result = await backend.verify(tampered, { reportData });
    expect(failed(result)).to.deep.equal(['signature']);
  });

  it('refuses the quote against another nonce', async () => {
    const result = await backend.verify(evidence, { reportData: new Uint8Array(randomBytes(64)) });
    expect(failed(result)).to.deep.equal(['report-data']);
    expect(detailOf(result, 'report-data')).to.match(/is not the expected REPORT_DATA/);
  });

  it('refuses the quote with the public key of another TPM’s AK: the signature and the signer fail', async () => {
    const theirs = (await (await other.create()).attest(reportData)) as AttestationEvidenceV2;
    const swapped = withCollateral(evidence, { akPublic: theirs.collateral?.akPublic ?? '' });
    const result = await backend.verify(swapped, { reportData });
    expect(failed(result)).to.deep.equal(['signature', 'signer']);
  });

  it('refuses an AK that is not pinned when AKs are pinned, and accepts the one pinned', async () => {
    const pinnedElsewhere = await vtpm.create({ trustedAkFingerprints: ['ab'.repeat(32)] });
    const refused = await pinnedElsewhere.verify(evidence, { reportData });
    expect(failed(refused)).to.deep.equal(['ak-trusted']);
    expect(detailOf(refused, 'ak-trusted')).to.include(akFingerprint);
    const pinned = await vtpm.create({ trustedAkFingerprints: [akFingerprint.toUpperCase()] });
    const accepted = await pinned.verify(evidence, { reportData });
    expect(accepted.verified).to.equal(true);
    expect(detailOf(accepted, 'ak-trusted')).to.match(/is a pinned one/);
  });

  it('refuses an AK that is not a restricted signing key, which could sign a forged TPMS_ATTEST', async () => {
    const akPublic = Buffer.from(evidence.collateral?.akPublic ?? '', 'base64');
    akPublic[7] = (akPublic[7] as number) & ~0x01; // TPMA_OBJECT.restricted, bit 16 of the attributes at [6..10)
    const result = await backend.verify(withCollateral(evidence, { akPublic: akPublic.toString('base64') }), {
      reportData,
    });
    expect(failed(result)).to.deep.equal(['ak', 'signature', 'signer', 'ak-trusted']);
    expect(detailOf(result, 'ak')).to.match(/not a restricted signing key/);
  });

  it('refuses a changed PCR value beside the quote, even one the relying party expects', async () => {
    const pcrs = pcrsOf(evidence);
    pcrs.sha256['7'] = '11'.repeat(32);
    const tampered = withCollateral(evidence, { pcrs: JSON.stringify(pcrs) });
    const result = await backend.verify(tampered, { reportData, measurements: { pcr7: '11'.repeat(32) } });
    expect(failed(result)).to.deep.equal(['pcr-digest']);
    expect(detailOf(result, 'pcr-digest')).to.match(/a value was changed/);
    const missing = pcrsOf(evidence);
    delete missing.sha256['4'];
    const lacking = await backend.verify(withCollateral(evidence, { pcrs: JSON.stringify(missing) }), {
      reportData,
    });
    expect(detailOf(lacking, 'pcr-digest')).to.match(/lacks a sha256 value for quoted PCR 4/);
  });

  it('refuses PCRs other than expected, naming each', async () => {
    const result = await backend.verify(evidence, {
      reportData,
      measurements: { pcr7: '22'.repeat(32), mrtd: '00'.repeat(48) },
    });
    expect(failed(result)).to.deep.equal(['measurement', 'measurement']);
    expect(result.checks.filter((check) => !check.ok).map((check) => check.detail)).to.deep.equal([
      `pcr7 (sha256) is ${'00'.repeat(32)}, expected ${'22'.repeat(32)}`,
      'mrtd is no measurement of a TPM (pcr<N>)',
    ]);
    const fewer = await vtpm.create({ quotePcrs: [0, 7] });
    const quoted = (await fewer.attest(reportData)) as AttestationEvidenceV2;
    const notQuoted = await fewer.verify(quoted, { reportData, measurements: { pcr9: '00'.repeat(32) } });
    expect(detailOf(notQuoted, 'measurement')).to.equal('pcr9 is not among the PCRs quoted');
  });

  it('quotes a PCR a changed boot extended: the new value verifies, and fails against the old one', async () => {
    const running = await other.create();
    other.swtpm.extendPcr(7);
    const fresh = (await running.attest(reportData)) as AttestationEvidenceV2;
    const now = pcrsOf(fresh).sha256['7'] as string;
    expect(now).not.to.equal('00'.repeat(32));
    expect((await running.verify(fresh, { reportData, measurements: { pcr7: now } })).verified).to.equal(
      true,
    );
    const old = await running.verify(fresh, { reportData, measurements: { pcr7: '00'.repeat(32) } });
    expect(failed(old)).to.deep.equal(['measurement']);
  });

  it('binds the SHA-256 of REPORT_DATA when configured so, for TPMs without SHA-512', async () => {
    const hashing = await vtpm.create({ qualifyingData: 'sha256' });
    const quoted = (await hashing.attest(reportData)) as AttestationEvidenceV2;
    const result = await hashing.verify(quoted, { reportData });
    expect(result.verified).to.equal(true);
    expect(detailOf(result, 'report-data')).to.match(/SHA-256 of the expected REPORT_DATA/);
    expect(result.claims?.reportData).to.equal(createHash('sha256').update(reportData).digest('hex'));
    expect(result.claims?.details).to.deep.include({ reportDataBinding: 'sha256(report-data)' });
    expect(failed(await hashing.verify(quoted, { reportData: new Uint8Array(64) }))).to.deep.equal([
      'report-data',
    ]);
  });

  it('answers evidence without collateral, or of the wrong shape, with failed checks, never a throw', async () => {
    const bare = await backend.verify({ platform: 'vtpm', report: evidence.report, certificates: [] });
    expect(failed(bare)).to.deep.equal(['ak', 'signature', 'signer', 'ak-trusted', 'pcr-digest']);
    const shapeless = await backend.verify({
      platform: 'vtpm',
      report: 42,
    } as unknown as AttestationEvidenceV2);
    expect(failed(shapeless)).to.deep.equal(['evidence']);
  });

  it('refuses a REPORT_DATA that is not 64 bytes', async () => {
    const error = await rejectionOf(backend.attest(new Uint8Array(32)));
    expect(error.code).to.equal('invalid_request');
  });

  it('keeps the verifier pure, for the offline bundle: node:crypto, its structures, and types', () => {
    const imports = (file: string) =>
      [
        ...readFileSync(repoPath('attestation', 'vtpm', file), 'utf8').matchAll(
          /^import (type )?[^;]*? from '([^']+)';/gms,
        ),
      ].map(([, type, from]) => `${type ?? ''}${from}`);
    expect(imports('verify.ts')).to.deep.equal([
      'node:crypto',
      'type @sigil/plugin-api',
      './tpm-structures.ts',
    ]);
    expect(imports('tpm-structures.ts')).to.deep.equal([]);
    // The same verifier, called as the bundle calls it: no plugin around it.
    expect(verifyVtpmEvidence(evidence, { reportData }).verified).to.equal(true);
  });
});
