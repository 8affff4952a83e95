import { X509Certificate } from 'node:crypto';
import { commonName } from '../../attestation/tdx/certificates.ts';
import { splitPem } from '../../attestation/tdx/verify.ts';
import { tryRead, type InputFile } from './inputs.ts';

/** The certificates a file holds, PEM (one or more) or DER; undefined when it holds none. */
export function certificatesIn(file: InputFile): X509Certificate[] | undefined {
  const pems = splitPem(file.text);
  return tryRead(() =>
    pems.length > 0 ? pems.map((pem) => new X509Certificate(pem)) : [new X509Certificate(file.bytes)],
  );
}

/**
 * The certificates leaf first, each followed by its issuer, each once: the order the verifiers take a
 * chain in, whatever order the files came in. Only names are matched here; the verifiers check the
 * signatures.
 */
export function leafFirst(certificates: readonly X509Certificate[]): X509Certificate[] {
  const unique = certificates.filter(
    (certificate, index) =>
      certificates.findIndex((other) => other.fingerprint256 === certificate.fingerprint256) === index,
  );
  const issuesAnother = (candidate: X509Certificate) =>
    unique.some((other) => other !== candidate && other.checkIssued(candidate));
  const leaf = unique.find((certificate) => !issuesAnother(certificate)) ?? unique[0];
  if (leaf === undefined) return [];
  const ordered = [leaf];
  for (;;) {
    const last = ordered[ordered.length - 1] as X509Certificate;
    const issuer = unique.find((other) => !ordered.includes(other) && last.checkIssued(other));
    if (issuer === undefined) break;
    ordered.push(issuer);
  }
  return [...ordered, ...unique.filter((certificate) => !ordered.includes(certificate))];
}

/** What a file of certificates is shown as: `certificates: SEV-VCEK`. */
export const describeCertificates = (certificates: readonly X509Certificate[]): string =>
  `certificate${certificates.length === 1 ? '' : 's'}: ${certificates.map(commonName).join(', ')}`;
