/** Sigil's version, in a module of its own so that the CLI states it without loading the HTTP stack. */
export const SIGIL_VERSION = '0.1.0';
