import { createHash } from 'node:crypto';
import { SigilError, type AttestationEvidenceV2 } from '@sigil/plugin-api';
import type { VtpmConfig } from './config.ts';
import { failedWith, pcrSelection, TPM_RC, type Tpm, type TpmSession } from './tpm.ts';
import { parseQuoteAttest } from './tpm-structures.ts';
import { encodePcrs, PCR_BANK, VTPM_PLATFORM } from './verify.ts';

/**
 * Quotes by the attestation key (AK): an ECDSA P-256 restricted signing key, a primary key of the
 * endorsement hierarchy. A primary key is made from the hierarchy's seed and its template, so the
 * same AK is made again on every call, after every restart, with nothing persisted in the TPM's NV
 * memory or on disk; it changes only when the TPM's endorsement seed does (never, on a real TPM).
 */

const REPORT_DATA_BYTES = 64;
/** A quote's PCRs are read just after it: when one is extended between the two, quote again. */
const QUOTE_ATTEMPTS = 3;

// prettier-ignore
const AK_TEMPLATE = [
  '-C', 'e', // a primary key of the endorsement hierarchy
  '-g', 'sha256',
  '-G', 'ecc256:ecdsa-sha256:null',
  '-a', 'fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign',
];

async function makeAk(session: TpmSession): Promise<string> {
  await session.run('tpm2_createprimary', [...AK_TEMPLATE, '-c', 'ak.ctx', '-Q']);
  return 'ak.ctx';
}

/** The AK's `TPM2B_PUBLIC`. */
export function attestationKeyPublic(tpm: Tpm): Promise<Buffer> {
  return tpm.operation(async (session) => {
    await session.run('tpm2_readpublic', ['-c', await makeAk(session), '-o', 'ak.pub', '-Q']);
    return session.read('ak.pub');
  });
}

export class Quoter {
  private akPublic: Promise<Buffer> | undefined;

  constructor(
    private readonly tpm: Tpm,
    private readonly config: Pick<VtpmConfig, 'quotePcrs' | 'qualifyingData'>,
  ) {}

  /** A quote over `reportData` (or its SHA-256, per `qualifyingData`) and the configured PCRs. */
  async attest(reportData: Uint8Array): Promise<AttestationEvidenceV2> {
    if (reportData.length !== REPORT_DATA_BYTES)
      throw new SigilError(
        'invalid_request',
        `REPORT_DATA is ${reportData.length} bytes, not ${REPORT_DATA_BYTES}`,
      );
    const qualifying =
      this.config.qualifyingData === 'sha256'
        ? createHash('sha256').update(reportData).digest()
        : Buffer.from(reportData);
    this.akPublic ??= attestationKeyPublic(this.tpm).catch((err: unknown) => {
      this.akPublic = undefined;
      throw err;
    });
    const akPublic = await this.akPublic;
    for (let attempt = 1; ; attempt += 1) {
      const quote = await this.quote(qualifying);
      const consistent = createHash('sha256')
        .update(quote.pcrValues)
        .digest()
        .equals(parseQuoteAttest(quote.attest).pcrDigest);
      if (consistent || attempt === QUOTE_ATTEMPTS) {
        const values = new Map(
          this.config.quotePcrs.map((pcr, at) => [pcr, quote.pcrValues.subarray(at * 32, at * 32 + 32)]),
        );
        return {
          platform: VTPM_PLATFORM,
          report: quote.attest.toString('base64'),
          certificates: [],
          collateral: {
            signature: quote.signature.toString('base64'),
            akPublic: akPublic.toString('base64'),
            pcrs: encodePcrs(values),
          },
        };
      }
    }
  }

  private quote(qualifying: Buffer): Promise<{ attest: Buffer; signature: Buffer; pcrValues: Buffer }> {
    return this.tpm.operation(async (session) => {
      const ak = await makeAk(session);
      try {
        // prettier-ignore
        await session.run('tpm2_quote', [
          '-c', ak,
          '-l', pcrSelection(PCR_BANK, this.config.quotePcrs),
          '-q', qualifying.toString('hex'),
          '-g', 'sha256',
          '-m', 'quote.msg', // TPMS_ATTEST
          '-s', 'quote.sig', // TPMT_SIGNATURE
          '-o', 'quote.pcrs', '-F', 'values', // the PCR values, concatenated in selection order
          '-Q',
        ]);
      } catch (cause) {
        if (!failedWith(cause, TPM_RC.size)) throw cause;
        throw new SigilError(
          'unavailable',
          'tee-vtpm: the TPM refuses 64 bytes of qualifying data (it has no SHA-512)',
          {
            hint: 'set the option qualifyingData: "sha256", so that quotes bind the SHA-256 of REPORT_DATA',
            details: { reason: 'qualifying_data_too_large' },
            cause,
          },
        );
      }
      return {
        attest: await session.read('quote.msg'),
        signature: await session.read('quote.sig'),
        pcrValues: await session.read('quote.pcrs'),
      };
    });
  }
}
