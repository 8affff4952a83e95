import {
  parseEccPublic,
  parseEcdsaSignature,
  parseQuoteAttest,
  TPM_ALG,
} from '../../attestation/vtpm/tpm-structures.ts';
import { decodePcrs, encodePcrs, PCR_BANK, VTPM_PLATFORM } from '../../attestation/vtpm/verify.ts';
import {
  CollateralFiles,
  notMaterialOf,
  parses,
  tryRead,
  type EvidenceKind,
  type InputFile,
  type TakenFile,
} from './inputs.ts';

const NAME = 'TPM quote (TPMS_ATTEST)';
const DIGEST_BYTES = 32;

/** The sha256 PCRs the quote selects, in the order their values are concatenated. */
const quotedPcrs = (quote: InputFile): number[] =>
  tryRead(() => parseQuoteAttest(quote.bytes).pcrSelections.find((bank) => bank.hashAlg === TPM_ALG.sha256))
    ?.pcrs ?? [];

/**
 * PCR values by index: the evidence's `{"sha256":{…}}` JSON, or tpm2_quote's `-F values` (the
 * values of the quoted PCRs concatenated in their order); undefined when the file is neither.
 */
function pcrValuesIn(file: InputFile, quoted: readonly number[]): Map<number, Buffer> | undefined {
  if (file.json !== undefined) return tryRead(() => decodePcrs(file.text));
  if (quoted.length === 0 || file.bytes.length !== quoted.length * DIGEST_BYTES) return undefined;
  return new Map(
    quoted.map((pcr, at) => [pcr, file.bytes.subarray(at * DIGEST_BYTES, (at + 1) * DIGEST_BYTES)]),
  );
}

/**
 * A TPM2_Quote as tpm2_quote writes it: the message (`-m`, TPMS_ATTEST) with, as further files, the
 * signature (`-s`, TPMT_SIGNATURE), the PCR values (`-o … -F values`, concatenated in the quote's
 * order; or the evidence's `{"sha256":{…}}` JSON) and the attestation key's public area
 * (TPM2B_PUBLIC, as `tpm2_readpublic -o` writes it).
 */
export const tpmQuote: EvidenceKind = {
  name: NAME,
  platform: VTPM_PLATFORM,
  matches: (file) => parses(() => parseQuoteAttest(file.bytes)),
  assemble(quote, others) {
    const files: TakenFile[] = [{ path: quote.path, as: NAME }];
    const pcrs = quotedPcrs(quote);
    const found = new CollateralFiles();
    const put = (name: string, value: string, file: InputFile, as: string) => {
      found.put([name], value, file);
      files.push({ path: file.path, as });
    };
    for (const file of others) {
      const base64 = file.bytes.toString('base64');
      const values = pcrValuesIn(file, pcrs);
      if (parses(() => parseEcdsaSignature(file.bytes)))
        put('signature', base64, file, 'signature (TPMT_SIGNATURE)');
      else if (parses(() => parseEccPublic(file.bytes)))
        put('akPublic', base64, file, 'attestation key (TPM2B_PUBLIC)');
      else if (values !== undefined) {
        put('pcrs', encodePcrs(values), file, `${PCR_BANK} values of PCR ${[...values.keys()].join(',')}`);
      } else
        throw notMaterialOf(
          file,
          NAME,
          `its signature (TPMT_SIGNATURE), the attestation key (TPM2B_PUBLIC) and the ${PCR_BANK} values of PCR ${pcrs.join(',') || '…'} (tpm2_quote -o … -F values, or {"${PCR_BANK}":{…}} JSON)`,
        );
    }
    return {
      evidence: {
        platform: VTPM_PLATFORM,
        report: quote.bytes.toString('base64'),
        certificates: [],
        collateral: found.collateral,
      },
      files,
    };
  },
};
