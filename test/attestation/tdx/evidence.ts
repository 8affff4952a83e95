import { createHash, generateKeyPairSync, sign, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AttestationEvidenceV2 } from '@sigil/plugin-api';
import { childrenOf, readTlv } from '../../../attestation/tdx/der.ts';
import { parseTdxQuote } from '../../../attestation/tdx/quote.ts';
import { der, issueCertificate, issueRevocationList, type TestCertificate } from '../../support/test-pki.ts';
import { fixturePath } from '../../support/paths.ts';

/**
 * The recorded TDX material (test/fixtures/attestation/tdx, see its README) as evidence, and the same
 * quotes re-signed under a test root: their real TD reports, QE reports and PCK extensions, with an
 * attestation key, a PCK chain, CRLs and collateral the test signs, so that what only Intel could
 * sign (a revoked PCK, another TCB status, a debug TD with a valid signature) can be tried.
 */

export const TDX_FIXTURES = fixturePath('attestation', 'tdx');
const fixture = (name: string): Buffer => readFileSync(join(TDX_FIXTURES, name));

export const QUOTE_V4 = fixture('tdx_prod_quote_SPR_E4.dat');
export const QUOTE_V5 = fixture('quote_v5_sample.dat');
/** Inside every validity window the v4 quote's collateral has (see the fixtures' README). */
export const V4_TIME = new Date('2023-07-01T01:00:00Z');
/** Inside the v5 quote's PCK certificate and TCB info. */
export const V5_TIME = new Date('2026-02-03T01:00:00Z');

export type Collateral = Record<string, string>;

export const recordedCollateral = (tcbInfoFile = 'sample_tcbInfo_response'): Collateral => ({
  tcbInfo: fixture(tcbInfoFile).toString('utf8'),
  tcbInfoIssuerChain: fixture('tcb_signing_chain.pem').toString('utf8'),
  qeIdentity: fixture('sample_qeIdentity_response').toString('utf8'),
  qeIdentityIssuerChain: fixture('tcb_signing_chain.pem').toString('utf8'),
  pckCrl: fixture('pckcrl').toString('base64'),
  rootCaCrl: fixture('rootcrl.der').toString('base64'),
});

export const evidenceOf = (quote: Uint8Array, collateral: Collateral): AttestationEvidenceV2 => ({
  platform: 'tdx',
  report: Buffer.from(quote).toString('base64'),
  certificates: parseTdxQuote(quote).pckChain,
  collateral,
});

/** Offsets in a TD report (TDX module ABI, TDREPORT's TDINFO and TEE_TCB_INFO as quoted). */
export const TD_REPORT = { teeTcbSvn: 0, tdAttributes: 120, mrTd: 136, reportData: 520 } as const;

const SGX_EXTENSION_OID = der.oid('1.2.840.113741.1.13.1');

/** The DER `Extension` holding a certificate's SGX extension (FMSPC, CPUSVN, PCESVN, …). */
function sgxExtensionOf(pem: string): Buffer {
  const certificate = new X509Certificate(pem).raw;
  const tbs = childrenOf(certificate, readTlv(certificate, 0))[0];
  const extensionsField = childrenOf(certificate, tbs!).find((field) => field.tag === 0xa3);
  const extensions = childrenOf(certificate, childrenOf(certificate, extensionsField!)[0]!);
  const found = extensions.find((extension) => {
    const oid = childrenOf(certificate, extension)[0]!;
    return Buffer.from(certificate.subarray(oid.start, oid.end)).equals(SGX_EXTENSION_OID);
  });
  return Buffer.from(certificate.subarray(found!.start, found!.end));
}

const u16 = (value: number) => Buffer.from([value & 0xff, value >> 8]);
const u32 = (value: number) => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32LE(value);
  return bytes;
};
const p1363 = (data: Uint8Array, key: TestCertificate['privateKey']) =>
  sign('sha256', data, { key, dsaEncoding: 'ieee-p1363' });

export interface TestPkiOptions {
  /** The PCK certificate's validity; 2020–2040 by default. */
  pckNotAfter?: Date;
  /** Certificates the CRLs list: the PCK certificate (PCK CRL), the TCB signer (root CA CRL). */
  revoke?: readonly ('pck' | 'tcbSigner')[];
}

const YEARS = { from: new Date('2020-01-01T00:00:00Z'), to: new Date('2040-01-01T00:00:00Z') };

/** A root, a PCK CA, a TCB signer and CRLs, for one real quote's PCK (its SGX extension copied). */
export function testPki(realQuote: Uint8Array, options: TestPkiOptions = {}) {
  const root = issueCertificate({
    name: 'Test SGX Root CA',
    serial: '01',
    notBefore: YEARS.from,
    notAfter: YEARS.to,
    ca: true,
  });
  const pckCa = issueCertificate({
    name: 'Test SGX PCK Platform CA',
    serial: '02',
    issuer: root,
    notBefore: YEARS.from,
    notAfter: YEARS.to,
    ca: true,
  });
  const pck = issueCertificate({
    name: 'Test SGX PCK Certificate',
    serial: '7e57ce47',
    issuer: pckCa,
    notBefore: YEARS.from,
    notAfter: options.pckNotAfter ?? YEARS.to,
    ca: false,
    extensions: [sgxExtensionOf(parseTdxQuote(realQuote).pckChain[0]!)],
  });
  // The verifier wants collateral signed by a certificate of this name, as Intel's is.
  const tcbSigner = issueCertificate({
    name: 'Intel SGX TCB Signing',
    serial: '03',
    issuer: root,
    notBefore: YEARS.from,
    notAfter: YEARS.to,
    ca: false,
  });
  const crlDates = {
    thisUpdate: new Date('2023-01-01T00:00:00Z'),
    nextUpdate: new Date('2039-01-01T00:00:00Z'),
  };
  return {
    root: new X509Certificate(root.pem),
    pck,
    pckChain: [pck.pem, pckCa.pem, root.pem],
    pckCrl: issueRevocationList({
      issuer: pckCa,
      ...crlDates,
      revoked: options.revoke?.includes('pck') ? [pck.serial] : [],
    }),
    rootCaCrl: issueRevocationList({
      issuer: root,
      ...crlDates,
      revoked: options.revoke?.includes('tcbSigner') ? [tcbSigner.serial] : [],
    }),
    signedResponse(key: 'tcbInfo' | 'enclaveIdentity', body: unknown): string {
      const json = JSON.stringify(body);
      return `{"${key}":${json},"signature":"${p1363(Buffer.from(json), tcbSigner.privateKey).toString('hex')}"}`;
    },
    tcbSigningChain: tcbSigner.pem + root.pem,
  };
}
export type TestPki = ReturnType<typeof testPki>;

/**
 * `realQuote` re-signed under `pki`: a fresh attestation key signs its header and TD report (after
 * `editTdReport`), the QE report binds that key and is signed by the test PCK, and the test PCK chain
 * replaces Intel's.
 */
export function reSignedQuote(
  realQuote: Uint8Array,
  pki: TestPki,
  editTdReport: (report: Buffer) => void = () => {},
): Buffer {
  const quote = parseTdxQuote(realQuote);
  const signed = Buffer.from(quote.signed);
  editTdReport(signed.subarray(signed.length - (quote.version === 5 ? 648 : 584)));
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = publicKey.export({ format: 'jwk' });
  const attestationKey = Buffer.concat([Buffer.from(jwk.x!, 'base64url'), Buffer.from(jwk.y!, 'base64url')]);
  const qeReport = Buffer.from(quote.qeReport.raw);
  const binding = createHash('sha256').update(attestationKey).update(quote.qeAuthData).digest();
  Buffer.concat([binding, Buffer.alloc(32)]).copy(qeReport, 320);
  const chain = Buffer.from(pki.pckChain.join(''));
  const qeCertification = Buffer.concat([
    qeReport,
    p1363(qeReport, pki.pck.privateKey),
    u16(quote.qeAuthData.length),
    quote.qeAuthData,
    u16(5),
    u32(chain.length),
    chain,
  ]);
  const auth = Buffer.concat([
    p1363(signed, privateKey),
    attestationKey,
    u16(6),
    u32(qeCertification.length),
    qeCertification,
  ]);
  return Buffer.concat([signed, u32(auth.length), auth]);
}

/** The recorded TCB info / QE identity body, for a test to change and re-sign. */
export const recordedBody = (file: string, key: 'tcbInfo' | 'enclaveIdentity'): Record<string, unknown> =>
  JSON.parse(fixture(file).toString('utf8'))[key];

/** Collateral for a re-signed quote: recorded TCB info and QE identity (or edited), signed by `pki`. */
export function testCollateral(
  pki: TestPki,
  tcbInfo: unknown,
  qeIdentity = recordedBody('sample_qeIdentity_response', 'enclaveIdentity'),
): Collateral {
  return {
    tcbInfo: pki.signedResponse('tcbInfo', tcbInfo),
    tcbInfoIssuerChain: pki.tcbSigningChain,
    qeIdentity: pki.signedResponse('enclaveIdentity', qeIdentity),
    qeIdentityIssuerChain: pki.tcbSigningChain,
    pckCrl: pki.pckCrl.toString('base64'),
    rootCaCrl: pki.rootCaCrl.toString('base64'),
  };
}
