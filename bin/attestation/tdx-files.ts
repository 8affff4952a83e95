import { X509Certificate } from 'node:crypto';
import { AsnConvert } from '@peculiar/asn1-schema';
import { Certificate, CertificateList } from '@peculiar/asn1-x509';
import { crlAsBase64Der } from '../../attestation/tdx/collateral.ts';
import { parseTdxQuote } from '../../attestation/tdx/quote.ts';
import { platformOf } from '../../attestation/tdx/tcb.ts';
import { TDX_PLATFORM } from '../../attestation/tdx/verify.ts';
import { certificatesIn, describeCertificates, leafFirst } from './certificate-files.ts';
import {
  CollateralFiles,
  isRecord,
  notMaterialOf,
  parses,
  tryRead,
  unusable,
  type EvidenceKind,
  type InputFile,
  type TakenFile,
} from './inputs.ts';

const NAME = 'TDX quote';
const MATERIAL =
  "the TCB info and QE identity (JSON as Intel's PCS serves them), their issuer chain (PEM), the PCK CRL and the root CA CRL (DER, PEM or hex), and the PCK chain when the quote carries none";

/** Who issued a CRL or a certificate, as DER: what tells the PCK CRL from the root CA's. */
const crlIssuer = (der: Uint8Array) =>
  Buffer.from(AsnConvert.serialize(AsnConvert.parse(der, CertificateList).tbsCertList.issuer));
const certificateIssuer = (certificate: X509Certificate) =>
  Buffer.from(AsnConvert.serialize(AsnConvert.parse(certificate.raw, Certificate).tbsCertificate.issuer));

/** Whether the CRL (base64 DER) is issued by `issuer`. */
function issuedBy(der: string, issuer: Buffer, file: InputFile): boolean {
  try {
    return issuer.equals(crlIssuer(Buffer.from(der, 'base64')));
  } catch (error) {
    throw unusable(
      `${file.path}: a CRL whose issuer cannot be read (${(error as Error).message})`,
      'unknown_format',
    );
  }
}

/** A PCK certificate carries Intel's SGX extension (FMSPC, TCB); the TCB signer's chain does not. */
const isPckChain = (certificates: readonly X509Certificate[]) =>
  certificates[0] !== undefined && parses(() => platformOf(certificates[0] as X509Certificate));

/**
 * A TDX quote (v4 or v5, binary or hex) with its collateral as further files, named in the evidence
 * as attestation/tdx/collateral.ts names them: each file recognised by content, the two CRLs told
 * apart by their issuer (the PCK CRL's is the PCK certificate's).
 */
export const tdxQuote: EvidenceKind = {
  name: NAME,
  platform: TDX_PLATFORM,
  matches: (file) => parses(() => parseTdxQuote(file.bytes)),
  assemble(quote, others) {
    const files: TakenFile[] = [{ path: quote.path, as: NAME }];
    const found = new CollateralFiles();
    const given: X509Certificate[][] = [];
    const crls: { file: InputFile; der: string }[] = [];
    for (const file of others) {
      const json = isRecord(file.json) ? file.json : {};
      const certificates = certificatesIn(file);
      if (isRecord(json.tcbInfo)) {
        found.put(['tcbInfo'], file.text, file);
        files.push({ path: file.path, as: `TCB info (FMSPC ${String(json.tcbInfo.fmspc)})` });
      } else if (isRecord(json.enclaveIdentity)) {
        found.put(['qeIdentity'], file.text, file);
        files.push({ path: file.path, as: `QE identity (${String(json.enclaveIdentity.id)})` });
      } else if (certificates !== undefined) {
        const chain = leafFirst(certificates);
        const ofPck = isPckChain(chain);
        if (ofPck) given.push(chain);
        else {
          const pem = chain.map((certificate) => certificate.toString()).join('');
          found.put(['tcbInfoIssuerChain', 'qeIdentityIssuerChain'], pem, file);
        }
        files.push({
          path: file.path,
          as: `${ofPck ? 'PCK chain' : 'TCB info and QE identity issuer chain'}, ${describeCertificates(chain)}`,
        });
      } else {
        const der = tryRead(() => crlAsBase64Der(file.bytes, file.path));
        if (der === undefined) throw notMaterialOf(file, NAME, MATERIAL);
        crls.push({ file, der });
      }
    }
    const pckChain = leafFirst(given.flat()).map((certificate) => certificate.toString());
    // Told apart by the PCK certificate the verifier judges: the quote's own when it carries one.
    const judged = tryRead(() => parseTdxQuote(quote.bytes).pckChain[0]) ?? pckChain[0];
    const pckIssuer = judged === undefined ? undefined : certificateIssuer(new X509Certificate(judged));
    for (const { file, der } of crls) {
      const ofPck = pckIssuer !== undefined && issuedBy(der, pckIssuer, file);
      found.put([ofPck ? 'pckCrl' : 'rootCaCrl'], der, file);
      files.push({ path: file.path, as: ofPck ? 'PCK CRL' : 'root CA CRL' });
    }
    return {
      evidence: {
        platform: TDX_PLATFORM,
        report: quote.bytes.toString('base64'),
        certificates: pckChain,
        collateral: found.collateral,
      },
      files,
    };
  },
};
