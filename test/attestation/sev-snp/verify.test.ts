import { X509Certificate } from 'node:crypto';
import { expect } from 'chai';
import type { EvidenceVerification } from '@sigil/plugin-api';
import { pemBlocks } from '../../../attestation/sev-snp/certificates.ts';
import { AMD_PRODUCTS, AMD_ROOTS } from '../../../attestation/sev-snp/roots.ts';
import { createSnpVerifier, DEFAULT_SNP_POLICY } from '../../../attestation/sev-snp/verify.ts';
import {
  AT,
  evidenceOf,
  fixture,
  flipBit,
  forgeCertificate,
  forgeMilanChain,
  MEASUREMENT,
  MILAN_CHAIN,
  POLICY_DEBUG,
  POLICY_MIGRATE_MA,
  REAL_EVIDENCE,
  REPORT,
  REPORT_DATA,
  realVcekExtensions,
  resign,
  VCEK,
  withPolicyBit,
} from './material.ts';

const verifier = createSnpVerifier(DEFAULT_SNP_POLICY);

const failed = (result: EvidenceVerification) =>
  result.checks.filter((check) => !check.ok).map((check) => check.id);
const detailOf = (result: EvidenceVerification, id: string) =>
  result.checks.find((check) => check.id === id)?.detail;

/** The checks every genuine, well-chained report passes whatever its policy. */
const CRYPTOGRAPHIC_CHECKS = ['report', 'certificates', 'chain', 'validity', 'signature', 'tcb', 'chip-id'];

/** A verifier that trusts a forged Milan chain instead of AMD's: what the forged material is judged by. */
function trustingForgedMilan(forged: ReturnType<typeof forgeMilanChain>, policy = DEFAULT_SNP_POLICY) {
  return createSnpVerifier(policy, { roots: { ...AMD_ROOTS, Milan: forged.roots } });
}

describe('tee-sev-snp verifier on the real Milan report', () => {
  it('passes every cryptographic check with its VCEK and AMD chain, and fails only debug: the report allows debugging', () => {
    const result = verifier.verify(REAL_EVIDENCE, {
      at: AT,
      reportData: REPORT_DATA,
      measurements: { measurement: MEASUREMENT },
    });
    expect(failed(result)).to.deep.equal(['debug']);
    expect(result.verified).to.equal(false);
    for (const id of [...CRYPTOGRAPHIC_CHECKS, 'report-data', 'measurement', 'migration-agent', 'smt'])
      expect(result.checks.find((check) => check.id === id)?.ok, id).to.equal(true);
    expect(detailOf(result, 'chain')).to.equal(
      "SEV-VCEK ← SEV-Milan ← ARK-Milan, AMD's Milan root shipped with the plugin",
    );
    expect(detailOf(result, 'debug')).to.match(/bit 19/);
  });

  it('reads the claims back: report data, measurement, version, policy, TCB, chip id', () => {
    const { claims } = verifier.verify(REAL_EVIDENCE, { at: AT });
    expect(claims?.reportData).to.equal(REPORT_DATA.toString('hex'));
    expect(claims?.measurements).to.deep.equal({ measurement: MEASUREMENT });
    const details = claims?.details as Record<string, unknown>;
    expect(details).to.include({
      version: 2,
      vmpl: 0,
      signingKey: 'vcek',
      product: 'Milan',
      certifiedProduct: 'Milan-B0',
    });
    expect(details.reportedTcb).to.deep.equal({ bootloader: 2, tee: 0, snp: 5, microcode: 68 });
    expect(details.policy).to.include({ raw: '0xb0000', debug: true, smt: true, migrateMa: false });
    expect(details.chipId).to.match(/^3ac3fe21e13fb099/);
  });

  it('chains a VCEK given alone through the shipped ASK', () => {
    const result = verifier.verify(evidenceOf(REPORT, [VCEK]), { at: AT });
    expect(failed(result)).to.deep.equal(['debug']);
  });

  it('refuses one flipped bit in the report body: the signature fails', () => {
    const result = verifier.verify(evidenceOf(flipBit(REPORT, 0x90), [VCEK, MILAN_CHAIN]), { at: AT });
    expect(failed(result)).to.deep.equal(['signature', 'debug']);
    expect(detailOf(result, 'signature')).to.match(/does not verify with SEV-VCEK's key/);
  });

  it('refuses one flipped bit in the signature', () => {
    for (const offset of [0x2a0, 0x2a0 + 72 + 10]) {
      const result = verifier.verify(evidenceOf(flipBit(REPORT, offset), [VCEK, MILAN_CHAIN]), { at: AT });
      expect(failed(result), `bit at ${offset}`).to.deep.equal(['signature', 'debug']);
    }
  });

  it('refuses a signature field with bytes beyond a P-384 scalar', () => {
    const result = verifier.verify(evidenceOf(flipBit(REPORT, 0x2a0 + 60), [VCEK]), { at: AT });
    expect(detailOf(result, 'signature')).to.equal('r or s is longer than a P-384 scalar');
  });

  it('refuses the Milan VCEK under the Genoa ASK and ARK', () => {
    const genoa = `${AMD_ROOTS.Genoa.ask}${AMD_ROOTS.Genoa.ark}`;
    const result = verifier.verify(evidenceOf(REPORT, [VCEK, genoa]), { at: AT });
    expect(failed(result)).to.deep.equal(['chain', 'debug']);
    expect(detailOf(result, 'chain')).to.equal('SEV-VCEK is not signed by SEV-Genoa');
  });

  it('refuses a self-signed ARK and an ASK of our own that look like AMD’s', () => {
    const { ark, ask } = forgeMilanChain();
    const result = verifier.verify(evidenceOf(REPORT, [VCEK, ask.pem, ark.pem]), { at: AT });
    expect(failed(result)).to.deep.equal(['chain', 'debug']);
    expect(detailOf(result, 'chain')).to.match(
      /^the root ARK-Milan \(SHA-256 .*\) is not one of AMD's ARKs shipped/,
    );
  });

  it('refuses a real ASK in the evidence that did not sign the VCEK, with the ARK left to the shipped roots', () => {
    const result = verifier.verify(evidenceOf(REPORT, [VCEK, AMD_ROOTS.Turin.ask]), { at: AT });
    expect(failed(result)).to.deep.equal(['chain', 'debug']);
    expect(detailOf(result, 'chain')).to.include('SEV-VCEK is not signed by SEV-Turin');
  });

  it('refuses certificates judged after the VCEK expired, and before it was issued', () => {
    const late = verifier.verify(REAL_EVIDENCE, { at: new Date('2030-01-01T00:00:00Z') });
    expect(failed(late)).to.deep.equal(['validity', 'debug']);
    expect(detailOf(late, 'validity')).to.equal(
      'at 2030-01-01T00:00:00.000Z: SEV-VCEK expired 2029-09-24T00:55:28.000Z',
    );
    const early = verifier.verify(REAL_EVIDENCE, { at: new Date('2022-01-01T00:00:00Z') });
    expect(detailOf(early, 'validity')).to.include('SEV-VCEK is not valid before 2022-09-24T00:55:28.000Z');
  });

  it('judges certificates by its clock when no time is expected', () => {
    const at2031 = createSnpVerifier(DEFAULT_SNP_POLICY, { now: () => new Date('2031-01-01T00:00:00Z') });
    expect(failed(at2031.verify(REAL_EVIDENCE))).to.include('validity');
  });

  it('refuses other REPORT_DATA and another measurement, each in its own check', () => {
    const result = verifier.verify(REAL_EVIDENCE, {
      at: AT,
      reportData: new Uint8Array(64),
      measurements: { measurement: '00'.repeat(48), mrtd: '00'.repeat(48) },
    });
    expect(failed(result)).to.deep.equal(['debug', 'report-data', 'measurement', 'measurement']);
    expect(detailOf(result, 'report-data')).to.match(/^REPORT_DATA 0102030405/);
    expect(
      result.checks.filter((check) => check.id === 'measurement').map((check) => check.detail),
    ).to.deep.equal([
      `MEASUREMENT ${MEASUREMENT} is not the expected ${'00'.repeat(48)}`,
      'sev-snp reports no measurement named mrtd (only measurement)',
    ]);
  });

  it('judges the debug bit on its own: cleared, the debug check passes and the signature fails', () => {
    const result = verifier.verify(evidenceOf(withPolicyBit(REPORT, POLICY_DEBUG, false), [VCEK]), {
      at: AT,
    });
    expect(failed(result)).to.deep.equal(['signature']);
    expect(detailOf(result, 'debug')).to.equal('the guest policy forbids debugging (bit 19 off)');
  });

  it('refuses a reported TCB below the configured minimum', () => {
    const strict = createSnpVerifier({ ...DEFAULT_SNP_POLICY, minimumTcb: { snp: 6, microcode: 68 } });
    const result = strict.verify(REAL_EVIDENCE, { at: AT });
    expect(failed(result)).to.deep.equal(['tcb-minimum', 'debug']);
    expect(detailOf(result, 'tcb-minimum')).to.equal('reported TCB is below the minimum: snp 5 < 6');
    const met = createSnpVerifier({ ...DEFAULT_SNP_POLICY, minimumTcb: { snp: 5, microcode: 68 } });
    expect(failed(met.verify(REAL_EVIDENCE, { at: AT }))).to.deep.equal(['debug']);
  });

  it('refuses a reported TCB the VCEK was not issued for (and the changed report’s signature)', () => {
    const result = verifier.verify(evidenceOf(flipBit(REPORT, 0x180 + 6), [VCEK]), { at: AT });
    expect(failed(result)).to.deep.equal(['signature', 'tcb', 'debug']);
    expect(detailOf(result, 'tcb')).to.equal(
      "reported TCB differs from SEV-VCEK's: snp 4 in the report, 5 in the certificate",
    );
  });

  it('refuses SMT when the policy forbids it: the real platform runs with SMT', () => {
    const noSmt = createSnpVerifier({ ...DEFAULT_SNP_POLICY, allowSmt: false });
    const result = noSmt.verify(REAL_EVIDENCE, { at: AT });
    expect(failed(result)).to.deep.equal(['debug', 'smt']);
  });

  it('answers garbage, a short report and unknown versions with one failed check, no claims', () => {
    const cases: [Uint8Array, string][] = [
      [Buffer.from('not a report'), 'report'],
      [REPORT.subarray(0, 1000), 'report'],
      [Buffer.concat([REPORT, Buffer.alloc(1)]), 'report'],
      [Buffer.from(REPORT).fill(4, 0, 1), 'version'],
      [Buffer.from(REPORT).fill(1, 0, 1), 'version'],
    ];
    for (const [report, id] of cases) {
      const result = verifier.verify(evidenceOf(report, [VCEK]), { at: AT });
      expect(result.checks.map((check) => [check.id, check.ok])).to.deep.equal([[id, false]]);
      expect(result.claims).to.equal(undefined);
    }
  });

  it('refuses evidence without certificates or with unreadable ones, in failed checks', () => {
    const none = verifier.verify(evidenceOf(REPORT, []), { at: AT });
    expect(failed(none)).to.deep.equal([
      'certificates',
      'chain',
      'validity',
      'signature',
      'tcb',
      'chip-id',
      'debug',
    ]);
    expect(detailOf(none, 'signature')).to.equal('no VCEK to check the signature with');
    const broken = '-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----';
    const unreadable = verifier.verify(evidenceOf(REPORT, [broken]), { at: AT });
    expect(failed(unreadable)).to.include('certificates');
    expect(detailOf(unreadable, 'certificates')).to.match(/^certificate 1 cannot be read: /);
    const four = verifier.verify(evidenceOf(REPORT, [VCEK, MILAN_CHAIN, VCEK]), { at: AT });
    expect(detailOf(four, 'certificates')).to.equal('4 certificates; at most 3 (VCEK, ASK, ARK)');
  });
});

describe('tee-sev-snp verifier on a forged chain, re-signed reports', () => {
  const forged = forgeMilanChain();
  const productionReport = resign(withPolicyBit(REPORT, POLICY_DEBUG, false), forged.vcek.keys.privateKey);
  const forgedEvidence = evidenceOf(productionReport, [forged.vcek.pem, forged.ask.pem, forged.ark.pem]);

  it('refuses a report signed by a VCEK of a whole chain of our own only for its root', () => {
    const result = verifier.verify(forgedEvidence, { at: AT, reportData: REPORT_DATA });
    expect(failed(result)).to.deep.equal(['chain']);
  });

  it('verifies the same evidence when the forged root is the trusted one: every check can pass', () => {
    const result = trustingForgedMilan(forged).verify(forgedEvidence, {
      at: AT,
      reportData: REPORT_DATA,
      measurements: { measurement: MEASUREMENT },
    });
    expect(failed(result)).to.deep.equal([]);
    expect(result.verified).to.equal(true);
  });

  it('fails the debug check alone for a validly signed debug report', () => {
    const debug = resign(REPORT, forged.vcek.keys.privateKey);
    const result = trustingForgedMilan(forged).verify(evidenceOf(debug, [forged.vcek.pem]), { at: AT });
    expect(failed(result)).to.deep.equal(['debug']);
  });

  it('refuses a migration agent unless allowed', () => {
    const withAgent = resign(
      withPolicyBit(productionReport, POLICY_MIGRATE_MA, true),
      forged.vcek.keys.privateKey,
    );
    const evidence = evidenceOf(withAgent, [forged.vcek.pem]);
    expect(failed(trustingForgedMilan(forged).verify(evidence, { at: AT }))).to.deep.equal([
      'migration-agent',
    ]);
    const allowing = trustingForgedMilan(forged, { ...DEFAULT_SNP_POLICY, allowMigrationAgent: true });
    expect(failed(allowing.verify(evidence, { at: AT }))).to.deep.equal([]);
  });

  it('refuses a VCEK whose TCB extensions differ from the reported TCB, and one of another chip', () => {
    const extensions = realVcekExtensions();
    extensions.set('1.3.6.1.4.1.3704.1.3.3', Uint8Array.from([0x02, 0x01, 0x04]));
    extensions.set('1.3.6.1.4.1.3704.1.4', new Uint8Array(64).fill(7));
    const other = forgeMilanChain(extensions);
    const report = resign(withPolicyBit(REPORT, POLICY_DEBUG, false), other.vcek.keys.privateKey);
    const result = trustingForgedMilan(other).verify(evidenceOf(report, [other.vcek.pem]), { at: AT });
    expect(failed(result)).to.deep.equal(['tcb', 'chip-id']);
    expect(detailOf(result, 'tcb')).to.equal(
      "reported TCB differs from SEV-VCEK's: snp 5 in the report, 4 in the certificate",
    );
  });

  it('reads a version 3 report (with CPUID) and refuses one that names a VLEK but comes with a VCEK', () => {
    const v3 = Buffer.from(productionReport);
    v3.writeUInt32LE(3, 0);
    v3.set([0x19, 0x01, 0x01], 0x188);
    const verified = trustingForgedMilan(forged).verify(
      evidenceOf(resign(v3, forged.vcek.keys.privateKey), [forged.vcek.pem]),
      { at: AT },
    );
    expect(failed(verified)).to.deep.equal([]);
    expect(verified.claims?.details).to.deep.include({
      version: 3,
      cpuid: { family: 0x19, model: 1, stepping: 1 },
    });
    const vlek = Buffer.from(productionReport);
    vlek.writeUInt32LE(1 << 2, 0x48);
    const result = trustingForgedMilan(forged).verify(
      evidenceOf(resign(vlek, forged.vcek.keys.privateKey), [forged.vcek.pem]),
      { at: AT },
    );
    expect(failed(result)).to.deep.equal(['chain', 'signature']);
    expect(detailOf(result, 'signature')).to.equal(
      'the report is signed by its VLEK, the leaf certificate is SEV-VCEK',
    );
  });

  it('refuses a leaf certificate that has expired by its own dates', () => {
    const ark = forgeCertificate('ARK-Milan', 'self');
    const ask = forgeCertificate('SEV-Milan', { commonName: 'ARK-Milan', forged: ark });
    const vcek = forgeCertificate(
      'SEV-VCEK',
      { commonName: 'SEV-Milan', forged: ask },
      realVcekExtensions(),
      {
        notBefore: new Date('2021-01-01T00:00:00Z'),
        notAfter: new Date('2022-01-01T00:00:00Z'),
      },
    );
    const chain = { ark, ask, vcek, roots: { ask: ask.pem, ark: ark.pem } };
    const report = resign(withPolicyBit(REPORT, POLICY_DEBUG, false), vcek.keys.privateKey);
    const result = trustingForgedMilan(chain).verify(evidenceOf(report, [vcek.pem]), { at: AT });
    expect(failed(result)).to.deep.equal(['validity']);
  });
});

describe('tee-sev-snp roots', () => {
  const files = {
    Milan: 'ask_ark_milan.pem',
    Genoa: 'ask_ark_genoa.pem',
    Turin: 'ask_ark_turin_vcek.pem',
  } as const;

  it('are the ASK and ARK of go-sev-guest’s trust files, each ARK self-signed and each ASK signed by it', () => {
    for (const product of AMD_PRODUCTS) {
      const [askCertificate, arkCertificate] = [AMD_ROOTS[product].ask, AMD_ROOTS[product].ark].map(
        (pem) => new X509Certificate(pem),
      ) as [X509Certificate, X509Certificate];
      // Compared as DER: the Turin file has CRLF line ends, the constants LF.
      const copied = pemBlocks([fixture(files[product]).toString('utf8')]).map(
        (pem) => new X509Certificate(pem).raw,
      );
      expect([askCertificate.raw, arkCertificate.raw], product).to.deep.equal(copied);
      expect(arkCertificate.subject).to.include(`CN=ARK-${product}`);
      expect(arkCertificate.verify(arkCertificate.publicKey), `${product} ARK self-signed`).to.equal(true);
      expect(askCertificate.verify(arkCertificate.publicKey), `${product} ASK signed by its ARK`).to.equal(
        true,
      );
    }
  });

  it('match the Milan chain the report came with', () => {
    expect(`${AMD_ROOTS.Milan.ask}${AMD_ROOTS.Milan.ark}`).to.equal(MILAN_CHAIN);
  });
});
