/** The platform's name, apart from the verifier: `sigil attestation verify`'s help lists it without loading the verifier. */
export const TDX_PLATFORM = 'tdx';
