import { REDACTED } from '../redaction.ts';

/**
 * Redaction for everything the conformance runner writes: reports, stdout, evidence.
 *
 * Checks sign in with real wallets and handle real credentials, and reports are meant to be shared
 * (attached to CI runs, sent to a certifier). So every string on its way out passes through
 * `redactSecrets`, which removes credentials by their shape, plus any exact value the run learned is
 * secret (an operator key given without `0x`, an opaque token of another implementation). Unlike the
 * host's `Redactor` (../redaction.ts), which catches known values in every encoding, this one also
 * catches credentials the run was never told about, by their shape.
 */

/** Credentials recognised by shape, with what replaces each; order matters (a JWT inside "Bearer …"). */
const SECRET_SHAPES: readonly { pattern: RegExp; replacement: string }[] = [
  {
    pattern: /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----/g,
    replacement: `${REDACTED} private key`,
  },
  // `Authorization: Bearer <anything>`, whatever the token's own format; 16 characters or more, so
  // prose such as "a bearer token" stays readable (shorter tokens are caught by header name instead).
  { pattern: /\b(Bearer)\s+[A-Za-z0-9._~+/-]{16,}=*/gi, replacement: `$1 ${REDACTED}` },
  // Compact JWS/JWT: base64url of `{"…` then two more segments (the last may be empty: `alg: none`).
  { pattern: /\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*/g, replacement: `${REDACTED} JWT` },
  // Sigil wallet tokens keep their public prefix so a reader still sees which kind of token it was.
  { pattern: /sigil_wt_[A-Za-z0-9_-]+/g, replacement: `sigil_wt_${REDACTED}` },
  // 32 bytes or more of 0x-hex: private keys and signatures (addresses, 20 bytes, stay readable).
  { pattern: /0x[0-9a-fA-F]{64,}/g, replacement: `0x${REDACTED}` },
  // RFC 9421 / ERC-8128 `Signature: eth=:<base64>:` and other structured-field byte sequences.
  { pattern: /:[A-Za-z0-9+/]{40,}={0,2}:/g, replacement: `:${REDACTED}:` },
  // Credentials in query strings or form bodies.
  {
    pattern: /([?&](?:access_token|token|api_key|apikey|key|signature|sig|secret)=)[^&#\s"']+/gi,
    replacement: `$1${REDACTED}`,
  },
];

/** Names of JSON fields and headers whose value is a credential, whatever it looks like. */
const SECRET_NAME_ENDINGS = [
  'token',
  'signature',
  'secret',
  'password',
  'privatekey',
  'apikey',
  'mnemonic',
  'authorization',
  'cookie',
];

/** True for `token`, `walletToken`, `private_key`, `X-API-Key`…; false for `tokenType`, `prefix`. */
export function isSecretName(name: string): boolean {
  const normalized = name.toLowerCase().replace(/[-_]/g, '');
  return SECRET_NAME_ENDINGS.some((ending) => normalized.endsWith(ending));
}

/** Shorter values would redact ordinary words; no credential is this short. */
const MIN_KNOWN_SECRET_LENGTH = 8;

/**
 * Replaces every credential in `text`: the known secret values given, then every recognised shape.
 * This is the one redaction function; `redactValue` and `EvidenceRedactor` apply it.
 */
export function redactSecrets(text: string, knownSecrets: Iterable<string> = []): string {
  let out = text;
  const known = [...knownSecrets].filter((value) => value.length >= MIN_KNOWN_SECRET_LENGTH);
  // Longest first, so a secret that contains another is replaced whole.
  for (const value of known.sort((a, b) => b.length - a.length)) out = out.split(value).join(REDACTED);
  for (const { pattern, replacement } of SECRET_SHAPES) out = out.replace(pattern, replacement);
  return out;
}

/** Redacts a JSON-like value deeply: secret-named fields lose their value, every string is scanned. */
export function redactValue(value: unknown, knownSecrets: Iterable<string> = []): unknown {
  const known = [...knownSecrets];
  const walk = (node: unknown): unknown => {
    if (typeof node === 'string') return redactSecrets(node, known);
    if (Array.isArray(node)) return node.map(walk);
    if (typeof node === 'object' && node !== null) {
      return Object.fromEntries(
        Object.entries(node).map(([key, inner]) => [
          key,
          isSecretName(key) && typeof inner === 'string' ? REDACTED : walk(inner),
        ]),
      );
    }
    return node;
  };
  return walk(value);
}

/** The secrets one run has learned, applied to everything the run records. */
export class EvidenceRedactor {
  private readonly known = new Set<string>();

  /** Remembers a secret value; a hex key is remembered with and without its `0x`. */
  remember(secret: string): void {
    this.known.add(secret);
    if (/^0x[0-9a-fA-F]+$/.test(secret)) this.known.add(secret.slice(2));
  }

  redact(text: string): string {
    return redactSecrets(text, this.known);
  }

  redactValue(value: unknown): unknown {
    return redactValue(value, this.known);
  }
}
