import type { Command } from 'commander';
import { PLATFORMS } from './attestation/inputs.ts';
import type { VerifyOptions } from './attestation/verify.ts';

const collect = (value: string, previous: string[]) => [...previous, value];

/** `sigil attestation …`, registered without loading the verifiers: `verify` imports them when it runs. */
export function registerAttestationCommands(program: Command): void {
  program
    .command('attestation')
    .description('Attestation evidence: verify it offline')
    .command('verify')
    .description(
      `Verify attestation evidence from files, offline, with the verifier of its platform's plugin: a raw SEV-SNP report (binary or hex) with its VCEK and ASK/ARK; a TDX quote with its collateral; a TPM quote (tpm2_quote's message, signature and PCR values, and the AK's public area); the JSON of GET /api/attestation/report or of its evidence; or a bundle of GET /api/attestation/bundle, checked as its own script checks it. Prints each check; exits 0 when every check passes, 1 when one fails, 2 when the input cannot be used`,
    )
    .argument('<files...>', 'the report, quote or evidence JSON, and the files that go with it, in any order')
    .option(
      '--platform <platform>',
      `take the evidence as this platform's (${PLATFORMS.join(', ')}) rather than detect it`,
    )
    .option(
      '--at <time>',
      'judge certificates and collateral at this time (ISO 8601; default: now): recorded material needs a time inside its validity',
    )
    .option('--report-data <hex>', 'the 64 bytes REPORT_DATA must be (128 hex characters)')
    .option(
      '--measurement <name=hex>',
      'a measurement the evidence must report (repeatable): sev-snp measurement; tdx mrtd, rtmr0…rtmr3; vtpm pcr<N>',
      collect,
      [],
    )
    .option(
      '--trusted-ak <sha256>',
      'vtpm: an attestation key to trust, by the SHA-256 of its SubjectPublicKeyInfo (repeatable; what `sigil tee seal` prints); default: any, on first use',
      collect,
      [],
    )
    .option('--json', 'print the verification as JSON')
    .action(async (paths: string[], options: VerifyOptions) => {
      const { verifyAttestation } = await import('./attestation/verify.ts');
      await verifyAttestation(paths, options);
    });
}
