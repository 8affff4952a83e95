import { X509Certificate } from 'node:crypto';
import { tableCertificates } from '../../attestation/sev-snp/guest.ts';
import { REPORT_BYTES, SUPPORTED_VERSIONS } from '../../attestation/sev-snp/report.ts';
import { PLATFORM } from '../../attestation/sev-snp/verify.ts';
import { certificatesIn, describeCertificates, leafFirst } from './certificate-files.ts';
import { notMaterialOf, tryRead, type EvidenceKind, type InputFile, type TakenFile } from './inputs.ts';

const NAME = 'SEV-SNP report';

/** The certificates of an extended report's certificate table (configfs-tsm's `auxblob`), if it is one. */
function certificateTable(file: InputFile): X509Certificate[] | undefined {
  const pems = Object.values(tryRead(() => tableCertificates(file.bytes)) ?? {});
  return pems.length === 0 ? undefined : pems.map((pem) => new X509Certificate(pem));
}

/**
 * A raw ATTESTATION_REPORT (binary, or hex), with the VCEK or VLEK and the ASK/ARK as further files
 * (PEM or DER, in any order), or the extended report's certificate table. Without an ASK and ARK the
 * verifier chains a VCEK through AMD's, which the plugin ships.
 */
export const snpReport: EvidenceKind = {
  name: NAME,
  platform: PLATFORM,
  matches: ({ bytes }) => bytes.length === REPORT_BYTES && SUPPORTED_VERSIONS.includes(bytes.readUInt32LE(0)),
  assemble(report, others) {
    const files: TakenFile[] = [{ path: report.path, as: NAME }];
    const certificates = others.flatMap((file) => {
      const loose = certificatesIn(file);
      const table = loose === undefined ? certificateTable(file) : undefined;
      const found = loose ?? table;
      if (found === undefined)
        throw notMaterialOf(
          file,
          NAME,
          "the VCEK or VLEK and the ASK/ARK (PEM or DER), or the extended report's certificate table",
        );
      files.push({
        path: file.path,
        as: `${table === undefined ? '' : 'certificate table, '}${describeCertificates(found)}`,
      });
      return found;
    });
    return {
      evidence: {
        platform: PLATFORM,
        report: report.bytes.toString('base64'),
        certificates: leafFirst(certificates).map((certificate) => certificate.toString()),
      },
      files,
    };
  },
};
