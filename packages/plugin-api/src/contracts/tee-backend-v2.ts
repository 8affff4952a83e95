import type { AttestationEvidence, DerivedKey, TeeStatus } from './tee-backend-v1.ts';

/**
 * `tee-backend` v2: v1 (what the hardware, or its absence, can attest and seal, reported honestly)
 * and a verifier of its platform's evidence, so that a relying party, the gateway's judgement of a
 * runtime and the offline bundle script share one verifier per platform.
 *
 * A conforming backend's `verify`:
 * - works offline: everything it needs is in the evidence (report, certificate chain, collateral) or
 *   shipped with the plugin (a vendor's root certificates); it fetches nothing;
 * - never throws on bad evidence: each thing it checks is one entry of `checks`, failed with the
 *   reason, and `verified` is true only when every check passed; it throws (`invalid_request`) only
 *   for evidence of another platform;
 * - checks at least the signature over the report, the chain from the signing key to a root it
 *   ships, that the report is not a debug one, and each of `expected` it is given (REPORT_DATA, each
 *   measurement), at `expected.at` (certificates and collateral valid then);
 * - returns the claims it read, even when a check failed (absent only when the report cannot be parsed).
 */
export interface TeeBackendV2 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v2';
  /** Platform name as shown in `/api/attestation`: `none`, `sev-snp`, `tdx`, `vtpm`. */
  readonly platform: string;
  /** Whether a TEE backs this process, which platform, and where its keys come from: honestly. */
  status(): Promise<TeeStatus>;
  /**
   * A fresh report binding `reportData` (64 bytes), with what a verifier needs beside it, or undefined
   * where the platform cannot attest.
   */
  attest(reportData: Uint8Array): Promise<AttestationEvidenceV2 | undefined>;
  /** As in v1: a 32-byte key per purpose, sealed to the hardware where the platform can seal. */
  signingKey(purpose: string): Promise<DerivedKey>;
  /** Verifies evidence of this backend's platform (see above). */
  verify(evidence: AttestationEvidenceV2, expected?: ExpectedEvidence): Promise<EvidenceVerification>;
  /**
   * The verifier the offline bundle script carries: the absolute path of a module whose named export
   * `verify(evidence, expected)` returns (or resolves to) what `verify` does for evidence of this
   * platform, with the platform's defaults for what an operator may configure (pinned keys, accepted
   * TCB levels): the same `verified`, and the same checks by id and outcome.
   * - The module is pure: no file, network or environment read at import or in `verify`; it imports
   *   node: built-ins and packages only, and it bundles (esbuild, CommonJS, Node 20) into one file;
   *   its `@sigil/plugin-api` imports are types only.
   * - It judges evidence of this platform only: the script picks it by the evidence's platform.
   * - Absent where the platform has no evidence to verify (`none`).
   */
  readonly offlineVerifier?: string;
}

export interface AttestationEvidenceV2 extends AttestationEvidence {
  /**
   * Material a verifier needs beside the report and the certificates (PEM), by name, each a string
   * (JSON as it was served, or base64 of binary): e.g. TDX `tcbInfo`, `qeIdentity`, `pckCrl`,
   * `rootCaCrl`; TPM `akPublic`, `pcrs`, `signature`.
   */
  collateral?: Readonly<Record<string, string>>;
}

/** What a relying party expects of evidence. */
export interface ExpectedEvidence {
  /** The 64 bytes REPORT_DATA (a TPM quote's qualifying data) must be. */
  reportData?: Uint8Array;
  /**
   * Measurements by name, lowercase hex: SEV-SNP `measurement`; TDX `mrtd`, `rtmr0`…`rtmr3`; TPM
   * `pcr<N>` (sha256 bank).
   */
  measurements?: Readonly<Record<string, string>>;
  /** When to judge certificates and collateral valid: now by default (recorded material needs its own time). */
  at?: Date;
}

export interface EvidenceCheck {
  /** Stable, e.g. `signature`, `chain`, `debug`, `report-data`, `measurement`, `tcb`. */
  id: string;
  ok: boolean;
  /** What was checked, and for a failure why, in a sentence. */
  detail: string;
}

export interface EvidenceVerification {
  platform: string;
  /** Every check passed. */
  verified: boolean;
  checks: readonly EvidenceCheck[];
  /** What the report says, read from it (hex); absent when it cannot be parsed. */
  claims?: {
    reportData: string;
    measurements: Readonly<Record<string, string>>;
    /** Anything else the platform reports: policy, TCB, versions, the chip or platform id. */
    details?: Readonly<Record<string, unknown>>;
  };
}
