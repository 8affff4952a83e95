/**
 * The names the build provenance is written with (provenance.ts) and read by (the offline checks in
 * offline-verification/verify-bundle.ts, which bundle this file and so must not import provenance.ts).
 */
export const IN_TOTO_STATEMENT = 'https://in-toto.io/Statement/v1';
export const SLSA_PROVENANCE = 'https://slsa.dev/provenance/v1';
export const IN_TOTO_PAYLOAD_TYPE = 'application/vnd.in-toto+json';
/** The subject's name: the code the code hash covers. */
export const CODE_SUBJECT = 'sigil-code';
/** The resolved dependency naming the lockfile (the dependency tree) by its SHA-256. */
export const LOCKFILE_DEPENDENCY = 'package-lock.json';
