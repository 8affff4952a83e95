/**
 * Types for the modules of @phala/dcap-qvl the verifier imports one by one. Its package root also
 * loads its PCCS client (collateral.js, which may require node-fetch), which an offline verifier has
 * no use for, so the verifier imports the parsing modules directly; their types are the root's.
 */

declare module '@phala/dcap-qvl/src/quote.js' {
  export { BinaryReader, EnclaveReport, Quote } from '@phala/dcap-qvl';
}

declare module '@phala/dcap-qvl/src/utils.js' {
  /** The SGX extension (OID 1.2.840.113741.1.13.1) of a PCK certificate, DER. */
  export function getIntelExtension(certificateDer: Uint8Array): Uint8Array;
  export function getFmspc(extension: Uint8Array): Uint8Array;
  export function getCpuSvn(extension: Uint8Array): Uint8Array;
  export function getPceSvn(extension: Uint8Array): number;
  /** The value under an OID path inside the SGX extension (e.g. [PCEID]). */
  export function findExtension(path: readonly string[], extension: Uint8Array): Uint8Array;
  /** The DER certificates of a PEM chain, in order. */
  export function extractCerts(pemChain: Uint8Array | string): Uint8Array[];
}

declare module '@phala/dcap-qvl/src/oids.js' {
  export const PCEID: string;
}

declare module '@phala/dcap-qvl/src/constants.js' {
  /** Intel SGX Root CA, DER. */
  export const TRUSTED_ROOT_CA_DER: Uint8Array;
  export const TEE_TYPE_TDX: number;
  export const ATTESTATION_KEY_TYPE_ECDSA256_WITH_P256_CURVE: number;
  export const PCK_CERT_CHAIN: number;
  export const QE_REPORT_CERT: number;
}

declare module '@phala/dcap-qvl/src/tcb_info.js' {
  /** Intel's order of TCB statuses, worse is higher (unknown statuses are the worst). */
  export function tcbStatusSeverity(status: string): number;
}
