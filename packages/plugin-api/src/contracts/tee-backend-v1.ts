/**
 * `tee-backend` v1: what the hardware (or its absence) can attest and seal. A backend must report
 * honestly: `none` says there is no TEE rather than pretending.
 */
export interface TeeBackendV1 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v1';
  /** Platform name as shown in `/api/attestation`: `none`, `sev-snp`, `tdx`, `vtpm`. */
  readonly platform: string;
  /** Whether a TEE backs this process, which platform, and where its keys come from: honestly. */
  status(): Promise<TeeStatus>;
  /** A fresh report binding `reportData` (64 bytes), or undefined where the platform cannot attest. */
  attest(reportData: Uint8Array): Promise<AttestationEvidence | undefined>;
  /**
   * A 32-byte key for one `purpose` (e.g. `execution-proof`): the same key for the same purpose on every
   * call, distinct keys for distinct purposes. Sealed to the hardware where the platform can seal (the
   * same after a restart on the same machine), derived from config otherwise, random per process as a
   * last resort; `source` says which, and matches `status().keySource`. Never logged or returned to clients.
   */
  signingKey(purpose: string): Promise<DerivedKey>;
}

export interface DerivedKey {
  key: Uint8Array;
  source: TeeStatus['keySource'];
}

export interface TeeStatus {
  teeEnabled: boolean;
  platform: string;
  /** Whether keys handed out by this backend are sealed to hardware or come from config. */
  keySource: 'sealed' | 'config' | 'ephemeral';
}

export interface AttestationEvidence {
  platform: string;
  /** The raw report, base64. */
  report: string;
  certificates: readonly string[];
}
