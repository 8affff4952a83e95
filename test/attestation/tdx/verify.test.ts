import { expect } from 'chai';
import type { EvidenceVerification } from '@sigil/plugin-api';
import { verifyTdxEvidence, type TdxVerifierOptions } from '../../../attestation/tdx/verify.ts';
import type { ExpectedEvidence, AttestationEvidenceV2 } from '@sigil/plugin-api';
import {
  evidenceOf,
  QUOTE_V4,
  QUOTE_V5,
  recordedBody,
  recordedCollateral,
  reSignedQuote,
  TD_REPORT,
  testCollateral,
  testPki,
  V4_TIME,
  V5_TIME,
  type TestPki,
} from './evidence.ts';

const failed = (result: EvidenceVerification): string[] =>
  result.checks.filter((check) => !check.ok).map((check) => check.id);
const detailOf = (result: EvidenceVerification, id: string): string =>
  result.checks.find((check) => check.id === id)?.detail ?? `no ${id} check`;

const realV4 = (collateral = recordedCollateral()) => evidenceOf(QUOTE_V4, collateral);
const verifyV4 = (evidence = realV4(), expected: ExpectedEvidence = {}) =>
  verifyTdxEvidence(evidence, { at: V4_TIME, ...expected });

const flipBit = (evidence: AttestationEvidenceV2, at: number): AttestationEvidenceV2 => {
  const bytes = Buffer.from(evidence.report, 'base64');
  bytes[at] = (bytes[at] as number) ^ 0x01;
  return { ...evidence, report: bytes.toString('base64') };
};

describe('tee-tdx verifier on the recorded production quote (v4) and its collateral', () => {
  it('verifies the signature, the QE report and its binding, the PCK chain to Intel’s root, both CRLs, TCB info and QE identity', () => {
    const result = verifyV4();
    for (const id of [
      'quote',
      'signature',
      'chain',
      'qe-report',
      'qe-report-data',
      'revocation',
      'tcb-info',
      'qe-identity',
      'debug',
    ])
      expect(result.checks.find((check) => check.id === id)?.ok, `${id}: ${detailOf(result, id)}`).to.equal(
        true,
      );
    expect(detailOf(result, 'chain')).to.equal(
      'Intel SGX PCK Certificate → Intel SGX PCK Platform CA → Intel SGX Root CA, each valid at 2023-07-01T01:00:00.000Z',
    );
  });

  it('fails the tcb check alone: the platform’s TCB is below every level of the TCB info of its own FMSPC', () => {
    const result = verifyV4();
    expect(result.verified).to.equal(false);
    expect(failed(result)).to.deep.equal(['tcb']);
    expect(detailOf(result, 'tcb')).to.match(
      /CPUSVN 0303020202010002.*PCESVN 11.*TEE_TCB_SVN 0300040.* is below every TCB level/,
    );
  });

  it('reads back the claims: REPORT_DATA, MRTD and RTMR0–3, version, TEE_TCB_SVN and FMSPC', () => {
    const { claims } = verifyV4();
    const body = QUOTE_V4.subarray(48);
    expect(claims?.reportData).to.equal(
      body.subarray(TD_REPORT.reportData, TD_REPORT.reportData + 64).toString('hex'),
    );
    expect(claims?.measurements).to.have.keys('mrtd', 'rtmr0', 'rtmr1', 'rtmr2', 'rtmr3');
    expect(claims?.measurements.mrtd).to.equal(
      body.subarray(TD_REPORT.mrTd, TD_REPORT.mrTd + 48).toString('hex'),
    );
    expect(claims?.details).to.include({
      version: 4,
      teeTcbSvn: '03000400000000000000000000000000',
      fmspc: '50806f000000',
      pceSvn: 11,
    });
  });

  it('checks REPORT_DATA and each measurement it is given, and refuses other values by name', () => {
    const { claims } = verifyV4();
    const reportData = Buffer.from(claims!.reportData, 'hex');
    const matching = verifyV4(realV4(), {
      reportData,
      measurements: { mrtd: claims!.measurements.mrtd!, rtmr0: claims!.measurements.rtmr0! },
    });
    expect(failed(matching)).to.deep.equal(['tcb']);
    expect(matching.checks.map((check) => check.id)).to.include.members([
      'report-data',
      'measurement.mrtd',
      'measurement.rtmr0',
    ]);

    const otherData = Buffer.from(reportData);
    otherData[63] = (otherData[63] as number) ^ 0xff;
    const wrong = verifyV4(realV4(), {
      reportData: otherData,
      measurements: { mrtd: '00'.repeat(48), mrseam: '00' },
    });
    expect(failed(wrong)).to.deep.equal(['tcb', 'report-data', 'measurement.mrtd', 'measurement.mrseam']);
    expect(detailOf(wrong, 'report-data')).to.contain(`expected ${otherData.toString('hex')}`);
    expect(detailOf(wrong, 'measurement.mrtd')).to.contain(
      `mrtd is ${claims!.measurements.mrtd}, expected 000000`,
    );
    expect(detailOf(wrong, 'measurement.mrseam')).to.contain('no measurement mrseam');
  });

  it('refuses one flipped bit in the TD report (the signature no longer verifies) and in the signature', () => {
    const inBody = verifyV4(flipBit(realV4(), 48 + TD_REPORT.mrTd));
    expect(failed(inBody)).to.deep.equal(['signature', 'tcb']);
    expect(detailOf(inBody, 'signature')).to.equal(
      'the quote signature does not verify with its attestation key',
    );
    const inSignature = verifyV4(flipBit(realV4(), 632 + 4 + 10));
    expect(failed(inSignature)).to.deep.equal(['signature', 'tcb']);
  });

  it('refuses a debug TD: TD_ATTRIBUTES bit 0 set (and the signature, which covered the attributes)', () => {
    const result = verifyV4(flipBit(realV4(), 48 + TD_REPORT.tdAttributes));
    expect(failed(result)).to.deep.equal(['signature', 'tcb', 'debug']);
    expect(detailOf(result, 'debug')).to.contain('debug TD');
  });

  it('refuses the chain at a time after the PCK certificate expired, and before it was issued', () => {
    const late = verifyV4(realV4(), { at: new Date('2030-01-01T00:00:00Z') });
    expect(detailOf(late, 'chain')).to.equal(
      'Intel SGX PCK Certificate expired 2029-09-20T13:20:31.000Z (checked at 2030-01-01T00:00:00.000Z)',
    );
    expect(failed(late)).to.include.members([
      'chain',
      'qe-report',
      'revocation',
      'tcb-info',
      'qe-identity',
      'tcb',
    ]);
    const early = verifyV4(realV4(), { at: new Date('2022-01-01T00:00:00Z') });
    expect(detailOf(early, 'chain')).to.contain('is not valid before 2022-09-20');
  });

  it('refuses Intel’s genuine chain against another root', () => {
    const pki = testPki(QUOTE_V4);
    const result = verifyTdxEvidence(realV4(), { at: V4_TIME }, { trustedRoot: pki.root });
    expect(detailOf(result, 'chain')).to.equal(
      'the chain ends in Intel SGX Root CA, a root other than the trusted Test SGX Root CA',
    );
  });

  it('fails the checks whose collateral is missing or not Intel’s, naming it', () => {
    const { tcbInfo: _tcbInfo, pckCrl: _pckCrl, ...partial } = recordedCollateral();
    const missing = verifyV4(realV4(partial));
    expect(detailOf(missing, 'revocation')).to.equal('the collateral has no pckCrl');
    expect(detailOf(missing, 'tcb-info')).to.equal('the collateral has no tcbInfo');
    expect(detailOf(missing, 'tcb')).to.contain('without authentic, current TCB info');

    const malformed = {
      ...recordedCollateral(),
      qeIdentity: `{"enclaveIdentity":{"id":"TD_QE"},"signature":"${'00'.repeat(64)}"}`,
    };
    expect(detailOf(verifyV4(realV4(malformed)), 'qe-identity')).to.match(
      /^the enclaveIdentity is malformed: .*→ at version/,
    );

    const edited = recordedCollateral();
    edited.tcbInfo = edited.tcbInfo!.replace('"tcbStatus":"OutOfDate"', '"tcbStatus":"UpToDate"');
    expect(detailOf(verifyV4(realV4(edited)), 'tcb-info')).to.equal(
      'the tcbInfo signature does not verify with Intel SGX TCB Signing',
    );
    const crl = Buffer.from(edited.pckCrl!, 'base64');
    crl[100] = (crl[100] as number) ^ 0x01;
    expect(detailOf(verifyV4(realV4({ ...edited, pckCrl: crl.toString('base64') })), 'revocation')).to.match(
      /^the PCK CRL (is not signed by Intel SGX PCK Platform CA|cannot be parsed)/,
    );
  });

  it('judges collateral at the time asked: CRLs, TCB info and QE identity out of date are refused', () => {
    const result = verifyV4(realV4(), { at: new Date('2023-07-10T00:00:00Z') });
    expect(detailOf(result, 'revocation')).to.equal(
      'the PCK CRL was due for renewal 2023-07-08T07:27:52.000Z, before 2023-07-10T00:00:00.000Z',
    );
    expect(detailOf(result, 'qe-identity')).to.equal(
      'qeIdentity was due for renewal 2023-07-08T07:24:59.000Z, before 2023-07-10T00:00:00.000Z',
    );
    expect(result.checks.find((check) => check.id === 'tcb-info')?.ok).to.equal(true);
  });

  it('answers garbage with a failed quote check and no claims, never an exception', () => {
    const result = verifyTdxEvidence({
      platform: 'tdx',
      report: Buffer.alloc(97, 7).toString('base64'),
      certificates: [],
    });
    expect(result).to.deep.include({ platform: 'tdx', verified: false });
    expect(result.checks).to.have.length(1);
    expect(result.checks[0]).to.include({ id: 'quote', ok: false });
    expect(result.claims).to.equal(undefined);
    const p384 = Buffer.from(QUOTE_V4);
    p384.writeUInt16LE(3, 2);
    expect(verifyTdxEvidence({ ...realV4(), report: p384.toString('base64') }).checks[0]?.detail).to.equal(
      'attestation key type 3, not ECDSA P-256',
    );
  });
});

describe('tee-tdx verifier on the recorded v5 quote (TD report 1.5)', () => {
  it('verifies its signature, QE report and PCK chain at its time, and says why its 2023 collateral cannot judge it', () => {
    const result = verifyTdxEvidence(evidenceOf(QUOTE_V5, recordedCollateral('sample_tcbinfo_response_v5')), {
      at: V5_TIME,
    });
    expect(failed(result)).to.deep.equal(['revocation', 'tcb-info', 'qe-identity', 'tcb']);
    expect(detailOf(result, 'tcb-info')).to.equal(
      'Intel SGX TCB Signing expired 2025-05-21T10:50:10.000Z (checked at 2026-02-03T01:00:00.000Z)',
    );
    expect(result.claims?.details).to.include({
      version: 5,
      fmspc: '90c06f000000',
      mrServiceTd: '00'.repeat(48),
    });
  });
});

describe('tee-tdx verifier end to end under a test root (the real quotes re-signed)', () => {
  /** The QE identity of 2023, re-dated to be current at the v5 quote's time. */
  const currentQeIdentity = () => ({
    ...recordedBody('sample_qeIdentity_response', 'enclaveIdentity'),
    nextUpdate: '2030-01-01T00:00:00Z',
  });
  /** The v4 platform's TCB info with its first level lowered to what the platform has, and that level's status. */
  const v4TcbInfo = (status: string) => {
    const tcbInfo = recordedBody('sample_tcbInfo_response', 'tcbInfo') as {
      tcbLevels: {
        tcb: { sgxtcbcomponents: { svn: number }[]; tdxtcbcomponents: { svn: number }[] };
        tcbStatus: string;
      }[];
    };
    const [level] = tcbInfo.tcbLevels;
    [3, 3, 2, 2, 2, 1, 0, 2].forEach((svn, i) => (level!.tcb.sgxtcbcomponents[i]!.svn = svn));
    level!.tcb.tdxtcbcomponents[2]!.svn = 4;
    level!.tcbStatus = status;
    return tcbInfo;
  };
  const verifyV4Under = (
    pki: TestPki,
    tcbInfo: unknown,
    options: TdxVerifierOptions = {},
    editTdReport?: (report: Buffer) => void,
  ) =>
    verifyTdxEvidence(
      evidenceOf(reSignedQuote(QUOTE_V4, pki, editTdReport), testCollateral(pki, tcbInfo)),
      { at: V4_TIME },
      { trustedRoot: pki.root, ...options },
    );

  it('verifies the v5 quote against Intel’s real v5 TCB info: platform, TDX module (TDX_01) and QE UpToDate', () => {
    const pki = testPki(QUOTE_V5);
    const tcbInfo = recordedBody('sample_tcbinfo_response_v5', 'tcbInfo');
    const result = verifyTdxEvidence(
      evidenceOf(reSignedQuote(QUOTE_V5, pki), testCollateral(pki, tcbInfo, currentQeIdentity())),
      { at: V5_TIME },
      { trustedRoot: pki.root },
    );
    expect(failed(result)).to.deep.equal([]);
    expect(result.verified).to.equal(true);
    expect(detailOf(result, 'tcb')).to.equal(
      'TCB UpToDate (platform UpToDate, TDX module UpToDate, QE UpToDate)',
    );
    expect(result.claims?.details).to.include({ tcbStatus: 'UpToDate' });
  });

  it('verifies the v4 quote where a TCB level it meets is UpToDate, and refuses it where that level is OutOfDate', () => {
    const pki = testPki(QUOTE_V4);
    expect(failed(verifyV4Under(pki, v4TcbInfo('UpToDate')))).to.deep.equal([]);
    const outOfDate = verifyV4Under(pki, v4TcbInfo('OutOfDate'), {
      acceptedTcbStatuses: ['SWHardeningNeeded'],
    });
    expect(failed(outOfDate)).to.deep.equal(['tcb']);
    expect(detailOf(outOfDate, 'tcb')).to.equal(
      'TCB OutOfDate (platform OutOfDate, QE UpToDate): accepted are UpToDate, SWHardeningNeeded',
    );
    expect(failed(verifyV4Under(pki, v4TcbInfo('Revoked')))).to.deep.equal(['tcb']);
  });

  it('passes SWHardeningNeeded only when the options accept it', () => {
    const pki = testPki(QUOTE_V4);
    expect(failed(verifyV4Under(pki, v4TcbInfo('SWHardeningNeeded')))).to.deep.equal(['tcb']);
    const accepted = verifyV4Under(pki, v4TcbInfo('SWHardeningNeeded'), {
      acceptedTcbStatuses: ['SWHardeningNeeded'],
    });
    expect(accepted.verified).to.equal(true);
    expect(accepted.claims?.details).to.include({ tcbStatus: 'SWHardeningNeeded' });
  });

  it('names an FMSPC mismatch: TCB info of another platform', () => {
    const pki = testPki(QUOTE_V4);
    const otherPlatform = {
      ...recordedBody('sample_tcbinfo_response_v5', 'tcbInfo'),
      issueDate: '2023-01-01T00:00:00Z',
    };
    const result = verifyV4Under(pki, otherPlatform);
    expect(failed(result)).to.deep.equal(['tcb']);
    expect(detailOf(result, 'tcb')).to.equal(
      "the TCB info is for FMSPC 90c06f000000, the PCK certificate's platform is FMSPC 50806f000000",
    );
  });

  it('refuses a revoked PCK certificate, and collateral signed by a revoked TCB signer', () => {
    const revokedPck = verifyV4Under(testPki(QUOTE_V4, { revoke: ['pck'] }), v4TcbInfo('UpToDate'));
    expect(failed(revokedPck)).to.deep.equal(['revocation']);
    expect(detailOf(revokedPck, 'revocation')).to.equal(
      'Test SGX PCK Certificate (serial 7E57CE47) is revoked by the PCK CRL',
    );
    const revokedSigner = verifyV4Under(testPki(QUOTE_V4, { revoke: ['tcbSigner'] }), v4TcbInfo('UpToDate'));
    expect(failed(revokedSigner)).to.deep.equal(['revocation']);
    expect(detailOf(revokedSigner, 'revocation')).to.equal(
      'Intel SGX TCB Signing (serial 03) is revoked by the root CA CRL',
    );
  });

  it('refuses an expired PCK certificate, and what hangs on it', () => {
    const pki = testPki(QUOTE_V4, { pckNotAfter: new Date('2023-06-30T00:00:00Z') });
    const result = verifyV4Under(pki, v4TcbInfo('UpToDate'));
    expect(failed(result)).to.deep.equal(['chain', 'qe-report', 'revocation', 'tcb']);
    expect(detailOf(result, 'chain')).to.equal(
      'Test SGX PCK Certificate expired 2023-06-30T00:00:00.000Z (checked at 2023-07-01T01:00:00.000Z)',
    );
  });

  it('refuses a debug TD whose quote is otherwise genuine', () => {
    const pki = testPki(QUOTE_V4);
    const result = verifyV4Under(pki, v4TcbInfo('UpToDate'), {}, (report) => {
      report[TD_REPORT.tdAttributes] = (report[TD_REPORT.tdAttributes] as number) | 0x01;
    });
    expect(failed(result)).to.deep.equal(['debug']);
  });

  it('refuses a self-signed chain: a quote chained to a root that is not Intel’s', () => {
    const pki = testPki(QUOTE_V4);
    const result = verifyTdxEvidence(
      evidenceOf(reSignedQuote(QUOTE_V4, pki), testCollateral(pki, v4TcbInfo('UpToDate'))),
      { at: V4_TIME },
    );
    expect(detailOf(result, 'chain')).to.equal(
      'the chain ends in Test SGX Root CA, a root other than the trusted Intel SGX Root CA',
    );
    expect(failed(result)).to.include.members(['chain', 'tcb-info', 'qe-identity']);
  });

  it('refuses a QE report that binds another attestation key', () => {
    const pki = testPki(QUOTE_V4);
    const quote = reSignedQuote(QUOTE_V4, pki);
    const otherKey = reSignedQuote(QUOTE_V4, pki);
    otherKey.copy(quote, 632 + 4 + 64, 632 + 4 + 64, 632 + 4 + 128); // the other quote's attestation key
    const result = verifyTdxEvidence(
      evidenceOf(quote, testCollateral(pki, v4TcbInfo('UpToDate'))),
      { at: V4_TIME },
      { trustedRoot: pki.root },
    );
    expect(failed(result)).to.deep.equal(['signature', 'qe-report-data']);
  });
});
