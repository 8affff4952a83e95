import {
  isSigilError,
  type EvidenceCheck,
  type EvidenceVerification,
  type ExpectedEvidence,
} from '@sigil/plugin-api';
import { VTPM_PLATFORM } from '../../attestation/vtpm/verify.ts';
import { builtinVerifiers } from '../../services/shared/offline-verification/builtin-verifiers.ts';
import { verifyBundle } from '../../services/shared/offline-verification/verify-bundle.ts';
import { bundleIn, evidenceFromFiles } from './evidence-kinds.ts';
import { isPlatform, PLATFORMS, unusable, type Platform, type TakenFile } from './inputs.ts';

/**
 * `sigil attestation verify <file>…`: evidence from files, judged offline by the verifier of its
 * platform's plugin (the same code the plugin, the gateway and the bundle script run), with what
 * the relying party expects. Exit 0 when every check passes, 1 when one fails, 2 when the input
 * cannot be used.
 */

const EXIT_CHECK_FAILED = 1;
const EXIT_UNUSABLE_INPUT = 2;

export interface VerifyOptions {
  platform?: string;
  at?: string;
  reportData?: string;
  measurement: string[];
  trustedAk: string[];
  json?: boolean;
}

function hexOption(value: string, pattern: RegExp, option: string, what: string): Buffer {
  if (!pattern.test(value)) throw unusable(`${option} ${value}: not ${what}`, 'invalid_option');
  return Buffer.from(value, 'hex');
}

/** What the relying party expects, from the options; throws {@link unusable} on a malformed one. */
function expectedOf(options: VerifyOptions): Required<Pick<ExpectedEvidence, 'at'>> & ExpectedEvidence {
  const at = options.at === undefined ? new Date() : new Date(options.at);
  if (Number.isNaN(at.getTime()))
    throw unusable(`--at ${options.at}: not a time (ISO 8601, e.g. 2023-07-01T01:00:00Z)`, 'invalid_option');
  const measurements = Object.fromEntries(
    options.measurement.map((entry) => {
      const [, name, value] = /^([A-Za-z0-9_.-]+)=([0-9a-fA-F]+)$/.exec(entry) ?? [];
      if (name === undefined || value === undefined || value.length % 2 !== 0)
        throw unusable(`--measurement ${entry}: not name=hex`, 'invalid_option');
      return [name, value.toLowerCase()];
    }),
  );
  return {
    at,
    ...(options.reportData === undefined
      ? {}
      : {
          reportData: hexOption(options.reportData, /^[0-9a-fA-F]{128}$/, '--report-data', '64 bytes in hex'),
        }),
    ...(options.measurement.length === 0 ? {} : { measurements }),
  };
}

function trustedAksOf(options: VerifyOptions, platform: string): string[] {
  if (options.trustedAk.length > 0 && platform !== VTPM_PLATFORM)
    throw unusable(
      `--trusted-ak pins a TPM's attestation key: ${platform} evidence has none`,
      'invalid_option',
    );
  return options.trustedAk.map((fingerprint) =>
    hexOption(fingerprint, /^[0-9a-fA-F]{64}$/, '--trusted-ak', 'a SHA-256 in hex').toString('hex'),
  );
}

const printable = (value: unknown): string =>
  typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value);

/** Two columns, the first padded to its widest entry. */
const columns = (rows: readonly (readonly [string, string])[], indent = '') => {
  const width = Math.max(0, ...rows.map(([left]) => left.length));
  return rows.map(([left, right]) => `${indent}${left.padEnd(width)}  ${right}`);
};

/** Each check as PASS or FAIL with its id and why, and the verdict, as both kinds of input print them. */
function checkLines(
  checks: readonly EvidenceCheck[],
  verified: boolean,
): { checks: string[]; verdict: string } {
  const failed = checks.filter((check) => !check.ok).map((check) => check.id);
  return {
    checks: columns(checks.map((check) => [`${check.ok ? 'PASS' : 'FAIL'}  ${check.id}`, check.detail])),
    verdict: verified
      ? `verified: all ${checks.length} checks passed`
      : `not verified: ${failed.length} of ${checks.length} checks failed (${failed.join(', ')})`,
  };
}

function report(files: readonly TakenFile[], at: Date, result: EvidenceVerification): string {
  const printed = checkLines(result.checks, result.verified);
  const claims = result.claims;
  const details = Object.entries(claims?.details ?? {}).filter(([, value]) => value !== undefined);
  return [
    `${result.platform} evidence, judged at ${at.toISOString()}:`,
    ...columns(
      files.map((file) => [file.path, file.as]),
      '  ',
    ),
    '',
    ...printed.checks,
    '',
    ...(claims === undefined
      ? ['claims: none (the report cannot be read)']
      : [
          'claims:',
          ...columns([['reportData', claims.reportData], ...Object.entries(claims.measurements)], '  '),
          ...(details.length === 0 ? [] : ['  details:']),
          ...columns(
            details.map(([name, value]) => [name, printable(value)]),
            '    ',
          ),
        ]),
    '',
    printed.verdict,
    '',
  ].join('\n');
}

function verifyFiles(paths: readonly string[], options: VerifyOptions): number {
  if (options.platform !== undefined && !isPlatform(options.platform))
    throw unusable(`--platform ${options.platform}: one of ${PLATFORMS.join(', ')}`, 'invalid_option');
  const expected = expectedOf(options);
  const { evidence, files } = evidenceFromFiles(paths, options.platform);
  const platform = evidence.platform as Platform;
  const verify = builtinVerifiers({ trustedAkFingerprints: trustedAksOf(options, platform) })[platform];
  const result = verify(evidence, expected);
  process.stdout.write(
    options.json
      ? `${JSON.stringify({ files, at: expected.at.toISOString(), ...result }, null, 2)}\n`
      : report(files, expected.at, result),
  );
  return result.verified ? 0 : EXIT_CHECK_FAILED;
}

/**
 * A bundle, with the checks its own offline script makes (the same function): the evidence by its
 * platform's verifier, then what the report binds, the provenance and the code it names.
 */
async function verifyBundleFile(path: string, bundle: unknown, options: VerifyOptions): Promise<number> {
  if (options.reportData !== undefined || options.measurement.length > 0 || options.platform !== undefined)
    throw unusable(
      `${path}: a bundle says what its report must bind and which platform it is`,
      'invalid_option',
      'verify it without --report-data, --measurement and --platform',
    );
  const { at } = expectedOf(options);
  const trustedAkFingerprints = trustedAksOf(options, VTPM_PLATFORM);
  const result = await verifyBundle(bundle, { verifiers: builtinVerifiers({ trustedAkFingerprints }), at });
  const printed = checkLines(result.checks, result.verified);
  process.stdout.write(
    options.json
      ? `${JSON.stringify({ files: [{ path, as: 'Sigil attestation bundle' }], at: at.toISOString(), ...result }, null, 2)}\n`
      : [
          `attestation bundle ${path}, judged at ${at.toISOString()}:`,
          '',
          ...printed.checks,
          '',
          printed.verdict,
          '',
        ].join('\n'),
  );
  return result.verified ? 0 : EXIT_CHECK_FAILED;
}

async function verifyInputs(paths: readonly string[], options: VerifyOptions): Promise<number> {
  const found = bundleIn(paths);
  return found === undefined
    ? verifyFiles(paths, options)
    : verifyBundleFile(found.path, found.bundle, options);
}

/** What `sigil attestation verify` does; sets the exit code. */
export async function verifyAttestation(paths: readonly string[], options: VerifyOptions): Promise<void> {
  try {
    process.exitCode = await verifyInputs(paths, options);
  } catch (error) {
    if (!isSigilError(error) || error.code !== 'invalid_request') throw error;
    process.stderr.write(`sigil: ${error.message}${error.hint ? `\n  hint: ${error.hint}` : ''}\n`);
    process.exitCode = EXIT_UNUSABLE_INPUT;
  }
}
