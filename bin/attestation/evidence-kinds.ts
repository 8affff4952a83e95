import { z } from 'zod';
import { BUNDLE_FORMAT } from '../../services/shared/offline-verification/verify-bundle.ts';
import {
  isPlatform,
  isRecord,
  PLATFORMS,
  readInputFile,
  unusable,
  type AssembledEvidence,
  type EvidenceKind,
  type InputFile,
  type Platform,
} from './inputs.ts';
import { snpReport } from './sev-snp-files.ts';
import { tdxQuote } from './tdx-files.ts';
import { tpmQuote } from './vtpm-files.ts';

/** Each platform's raw report or quote: what `--platform` takes the first file as. */
const RAW_KINDS: Readonly<Record<Platform, EvidenceKind>> = {
  'sev-snp': snpReport,
  tdx: tdxQuote,
  vtpm: tpmQuote,
};

/** Evidence as the tee-backend contract has it (`AttestationEvidenceV2`), as the services serve it. */
const evidenceSchema = z.object({
  platform: z.string(),
  report: z.string(),
  certificates: z.array(z.string()),
  collateral: z.record(z.string(), z.string()).optional(),
});

/** Evidence a JSON document holds whole: nothing else is taken with it. */
function wholeEvidence(
  file: InputFile,
  others: readonly InputFile[],
  evidence: unknown,
  as: string,
): AssembledEvidence {
  const [other] = others;
  if (other !== undefined)
    throw unusable(
      `${other.path}: given with ${file.path}, which holds its evidence whole`,
      'unexpected_file',
      'verify the JSON alone',
    );
  const parsed = evidenceSchema.safeParse(evidence);
  if (!parsed.success) {
    const [issue] = parsed.error.issues;
    throw unusable(
      `${file.path}: its evidence is malformed (${issue?.path.join('.') ?? ''}: ${issue?.message ?? ''})`,
      'malformed_evidence',
    );
  }
  if (!isPlatform(parsed.data.platform))
    throw unusable(
      `${file.path}: ${parsed.data.platform} evidence; this command verifies ${PLATFORMS.join(', ')}`,
      'unknown_platform',
    );
  return { evidence: parsed.data, files: [{ path: file.path, as: `${as}, ${parsed.data.platform}` }] };
}

const REPORT_NAME = 'attestation report (GET /api/attestation/report)';
/** `GET /api/attestation/report`'s body: the evidence under `evidence`, null where the service has no TEE. */
const attestationReport: EvidenceKind = {
  name: REPORT_NAME,
  matches: ({ json }) => isRecord(json) && 'evidence' in json && 'reportData' in json,
  assemble(file, others) {
    const report = file.json as Record<string, unknown>;
    if (report.evidence === null)
      throw unusable(
        `${file.path}: the service attests nothing (platform ${String(report.platform)}, teeEnabled ${String(report.teeEnabled)}): its report carries no evidence`,
        'no_evidence',
      );
    return wholeEvidence(file, others, report.evidence, REPORT_NAME);
  },
};

const EVIDENCE_NAME = 'attestation evidence (JSON)';
/** Evidence as JSON on its own: the `evidence` of a report, or what a backend's `attest` returns. */
const evidenceJson: EvidenceKind = {
  name: EVIDENCE_NAME,
  matches: ({ json }) =>
    isRecord(json) && typeof json.platform === 'string' && typeof json.report === 'string',
  assemble(file, others) {
    return wholeEvidence(file, others, file.json, EVIDENCE_NAME);
  },
};

/**
 * The bundle among `paths` (`GET /api/attestation/bundle`'s body), which holds its evidence and what it
 * must bind whole, so it is verified alone; undefined when no file is one.
 */
export function bundleIn(paths: readonly string[]): { path: string; bundle: unknown } | undefined {
  const files = paths.map(readInputFile);
  const found = files.find(({ json }) => isRecord(json) && json.format === BUNDLE_FORMAT);
  if (found === undefined) return undefined;
  const other = files.find((file) => file !== found);
  if (other !== undefined)
    throw unusable(
      `${other.path}: given with ${found.path}, a bundle that holds everything it is verified with`,
      'unexpected_file',
      'verify the bundle alone',
    );
  return { path: found.path, bundle: found.json };
}

/** Every kind of evidence the command reads, each told by its content; the first that matches a file wins. */
export const EVIDENCE_KINDS: readonly EvidenceKind[] = [
  ...Object.values(RAW_KINDS),
  attestationReport,
  evidenceJson,
];

/**
 * The evidence the files make: the one file that is evidence, with the others as its material.
 * `platform` narrows detection to that platform's kinds and, when no file is one of them, takes the
 * first file as its raw report, for the verifier to judge even what cannot be recognised.
 */
export function evidenceFromFiles(paths: readonly string[], platform?: Platform): AssembledEvidence {
  const files = paths.map(readInputFile);
  const kinds = EVIDENCE_KINDS.filter(
    (kind) => platform === undefined || kind.platform === undefined || kind.platform === platform,
  );
  const found = files.flatMap((file) => {
    const kind = kinds.find((candidate) => candidate.matches(file));
    return kind === undefined ? [] : [{ file, kind }];
  });
  if (found.length > 1)
    throw unusable(
      `${found.map(({ file, kind }) => `${file.path} (${kind.name})`).join(' and ')} are each evidence: verify one at a time`,
      'several_evidence',
    );
  const [first] = files;
  const evidence =
    found[0] ??
    (platform === undefined || first === undefined ? undefined : { file: first, kind: RAW_KINDS[platform] });
  if (evidence === undefined)
    throw unusable(
      `${paths.join(', ')}: ${paths.length === 1 ? 'not' : 'none is'} a report, quote or evidence this command reads`,
      'unknown_format',
      `it reads ${EVIDENCE_KINDS.map((kind) => kind.name).join('; ')}; --platform ${PLATFORMS.join('|')} takes the first file as that platform's report`,
    );
  const assembled = evidence.kind.assemble(
    evidence.file,
    files.filter((file) => file !== evidence.file),
  );
  if (platform !== undefined && assembled.evidence.platform !== platform)
    throw unusable(
      `${evidence.file.path}: ${assembled.evidence.platform} evidence, not ${platform}`,
      'platform_mismatch',
    );
  return assembled;
}
