import { z } from 'zod';

/** PCR indexes of a PC client TPM: 0–23. */
const pcrIndexes = (what: string) =>
  z
    .array(z.number().int().min(0).max(23))
    .min(1)
    .refine((pcrs) => new Set(pcrs).size === pcrs.length, `${what}: each PCR once`)
    .transform((pcrs) => [...pcrs].sort((a, b) => a - b));

/**
 * What UEFI firmware measures into the PCRs it is sealed to, in a VM as on a PC: 0 firmware code,
 * 2 option ROMs and drivers, 4 the boot loader and what it starts through EFI (shim, GRUB, a UKI),
 * 7 Secure Boot's state and keys. Not 1 or 3, their configuration: a VM's size or boot order changes
 * them without changing any code. Add 8 and 9 (GRUB's kernel, initrd and command line) or 11 (a UKI)
 * to bind the kernel too.
 */
export const DEFAULT_SEAL_PCRS = [0, 2, 4, 7];
const ALL_PCRS = Array.from({ length: 24 }, (_, index) => index);

export const vtpmConfigSchema = z
  .object({
    tcti: z
      .string()
      .min(1)
      .default('device:/dev/tpmrm0')
      .describe(
        'How tpm2-tools reach the TPM (a TCTI): device:/dev/tpmrm0 on a machine with one, swtpm:host=127.0.0.1,port=2321 for swtpm',
      ),
    sealedDir: z
      .string()
      .min(1)
      .default('data/tee-vtpm')
      .describe('Where `sigil tee seal` writes the sealed keys and start-up unseals them from'),
    sealPcrs: pcrIndexes('sealPcrs')
      .default(DEFAULT_SEAL_PCRS)
      .describe(
        'sha256 PCRs `sigil tee seal` seals the keys to (their values then); start-up unseals with the PCRs recorded beside each key',
      ),
    quotePcrs: pcrIndexes('quotePcrs')
      .default(ALL_PCRS)
      .describe('sha256 PCRs a quote covers, with their values in the evidence'),
    qualifyingData: z
      .enum(['report-data', 'sha256'])
      .default('report-data')
      .describe(
        "What a quote's qualifying data is: the 64 bytes REPORT_DATA, or its SHA-256 for a TPM without SHA-512, whose qualifying data holds no 64 bytes (the quote fails with TPM_RC_SIZE)",
      ),
    trustedAkFingerprints: z
      .array(z.string().regex(/^[0-9a-fA-F]{64}$/, 'hex SHA-256'))
      .default([])
      .describe(
        'Attestation keys verify() trusts, by the SHA-256 of their SubjectPublicKeyInfo (what `sigil tee seal` prints); empty: an AK is trusted on first use, and the check ak-trusted says so',
      ),
  })
  .strict();

export type VtpmConfig = z.infer<typeof vtpmConfigSchema>;
