/**
 * `tee-backend` v1: what the hardware (or its absence) can attest and seal. A backend must report
 * honestly: `none` says there is no TEE rather than pretending.
 */
export interface TeeBackendV1 {
  readonly specVersion: 'v1';
  /** Platform name as shown in `/api/attestation`: `none`, `sev-snp`, `tdx`, `vtpm`. */
  readonly platform: string;
  status(): Promise<TeeStatus>;
  /** A fresh report binding `reportData` (64 bytes), or undefined where the platform cannot attest. */
  attest(reportData: Uint8Array): Promise<AttestationEvidence | undefined>;
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
