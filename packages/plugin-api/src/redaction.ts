/**
 * Secret redaction by every encoding a secret can take in text: a server that echoes, escapes or
 * encodes its secret (in a result, an error or its stderr) must not get it past the gateway, nor into
 * a log line. The encodings of a set of secrets are computed once, when a {@link Redactor} is made
 * (a process's start), and replaced in one pass of one regular expression (longest form first).
 */

export const REDACTED = '[REDACTED]';

/**
 * A derived encoding shorter than this is not redacted on its own: a few base64 or hex characters
 * would match ordinary text (a secret's own raw form is always redacted, whatever its length).
 */
const MIN_ENCODED_CHARS = 6;

/** The JSON string escape of `text`, without the quotes (as JSON.stringify and most encoders write it). */
const jsonEscaped = (text: string): string => JSON.stringify(text).slice(1, -1);

const unicodeEscape = (unit: string): string => `\\u${unit.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * The other JSON escapes common encoders write: every non-ASCII code unit as `\uxxxx` (Python's
 * json.dumps, PHP's json_encode; Java's encoders in upper case), `<`, `>`, `&`, U+2028 and U+2029 as
 * `\u` escapes (Go's encoding/json), `/` as `\/` (PHP).
 */
function otherJsonEscapes(text: string): string[] {
  const plain = jsonEscaped(text);
  const ascii = plain.replace(/[\u0080-\uffff]/g, unicodeEscape);
  return [
    ascii,
    ascii.replace(/\\u[0-9a-f]{4}/g, (escape) => `\\u${escape.slice(2).toUpperCase()}`),
    plain.replace(/[<>&\u2028\u2029]/g, unicodeEscape),
    ascii.replaceAll('/', '\\/'),
  ];
}

const lowerPercents = (text: string): string =>
  text.replace(/%[0-9A-F]{2}/g, (escape) => escape.toLowerCase());

/**
 * Percent-encodings: encodeURIComponent, the form encoding of URLSearchParams (space as `+`), and
 * RFC 3986's strictest (all but `A-Z a-z 0-9 - . _ ~`, space as `%20` or `+`: Python's quote and
 * quote_plus, Go's QueryEscape); each with upper- and lower-case escapes.
 */
function percentEncodings(text: string): string[] {
  const strict = encodeURIComponent(text).replace(
    /[!'()*]/g,
    (unit) => `%${unit.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  const encodings = [
    encodeURIComponent(text),
    new URLSearchParams({ s: text }).toString().slice(2),
    strict,
    strict.replaceAll('%20', '+'),
  ];
  return [...encodings, ...encodings.map(lowerPercents)];
}

/**
 * The characters of the base64 (or base64url) encoding of `bytes` that do not depend on what comes
 * before or after them, for each of the three alignments the secret can have in a longer stream:
 * character i is the secret's alone when its six bits lie inside the secret's bits.
 */
function base64Middles(bytes: Buffer, alphabet: 'base64' | 'base64url'): string[] {
  const middles: string[] = [];
  for (let offset = 0; offset < 3; offset += 1) {
    const encoded = Buffer.concat([Buffer.alloc(offset), bytes]).toString(alphabet);
    middles.push(encoded.slice(Math.ceil((8 * offset) / 6), Math.floor((8 * (offset + bytes.length)) / 6)));
  }
  return middles;
}

/**
 * Every form of `secret` to redact: raw, JSON-escaped (as each common encoder escapes), percent-encoded
 * (likewise), hex (both cases), base64 and base64url at each byte alignment; and each of those
 * JSON-escaped once and twice more, as it reads inside a JSON string (a log line) or a JSON text
 * inside one (a result quoted in a log line).
 */
export function encodingsOf(secret: string): string[] {
  const wellFormed = secret.toWellFormed();
  const bytes = Buffer.from(wellFormed, 'utf8');
  const hex = bytes.toString('hex');
  const derived = [
    ...otherJsonEscapes(secret),
    ...percentEncodings(wellFormed),
    hex,
    hex.toUpperCase(),
    ...base64Middles(bytes, 'base64'),
    ...base64Middles(bytes, 'base64url'),
  ];
  const forms = new Set<string>();
  for (const base of [secret, ...derived]) {
    const once = jsonEscaped(base);
    for (const encoded of [base, once, jsonEscaped(once)]) {
      if (encoded === secret || encoded.length >= MIN_ENCODED_CHARS) forms.add(encoded);
    }
  }
  return [...forms];
}

/**
 * Text at least this many characters per form is searched for each form, and replaced only when one
 * is found (most texts hold none): a search per form costs a fixed ~40 ns and then far less per
 * character than the alternation, which is faster for short texts and many forms (a log line, and
 * the log scrubber's union of every running process's forms). Measured on this machine: 10 KB and
 * 6 forms, 7 µs searched against 28 µs; 150 characters and 300 forms, 13 µs against 1 µs.
 */
const CHARS_PER_SEARCH = 16;

const regExpEscaped = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Above this many forms (the log scrubber's union, with many processes or sessions holding secrets),
 * a text is scanned once with the forms indexed by their first characters: a regular expression of
 * 600 forms took 15 ms to compile at each change and 3.5 µs a line, of 6000 forms 180 ms and 24 µs.
 */
const INDEXED_ABOVE = 256;
/** The prefix the index keys forms by: the log scrubber's shortest form. */
const INDEX_PREFIX = 6;

/** Redacts a fixed set of secrets, in every encoding, from text (services/gateway/tool-results.ts walks results with it). */
export class Redactor {
  static readonly none = new Redactor([]);

  /** Longest first, so a form that contains another is replaced whole. */
  readonly encodings: readonly string[];
  private readonly pattern: RegExp | undefined;
  /** Forms by their first {@link INDEX_PREFIX} characters (longest first), when there are many. */
  private readonly index: PrefixIndex | undefined;

  private constructor(encodings: Iterable<string>) {
    this.encodings = [...new Set(encodings)].sort((a, b) => b.length - a.length);
    const indexed =
      this.encodings.length > INDEXED_ABOVE && this.encodings.every((form) => form.length >= INDEX_PREFIX);
    this.index = indexed ? indexByPrefix(this.encodings) : undefined;
    this.pattern =
      indexed || this.encodings.length === 0
        ? undefined
        : new RegExp(this.encodings.map(regExpEscaped).join('|'), 'g');
  }

  /** `minLength`: forms shorter than this are left alone (log lines are mostly ordinary words). */
  static of(secrets: Iterable<string>, minLength = 1): Redactor {
    const encodings: string[] = [];
    for (const secret of secrets) if (secret.length > 0) encodings.push(...encodingsOf(secret));
    const kept = encodings.filter((form) => form.length >= minLength);
    return kept.length === 0 ? Redactor.none : new Redactor(kept);
  }

  /** One redactor for the secrets of several (their encodings already computed). */
  static union(redactors: Iterable<Redactor>, minLength = 1): Redactor {
    const encodings: string[] = [];
    for (const redactor of redactors)
      encodings.push(...redactor.encodings.filter((form) => form.length >= minLength));
    return encodings.length === 0 ? Redactor.none : new Redactor(encodings);
  }

  get empty(): boolean {
    return this.encodings.length === 0;
  }

  text(text: string): string {
    if (this.index !== undefined) return replaceIndexed(text, this.index);
    if (this.pattern === undefined) return text;
    if (text.length < this.encodings.length * CHARS_PER_SEARCH) return text.replace(this.pattern, REDACTED);
    for (const form of this.encodings) if (text.includes(form)) return text.replace(this.pattern, REDACTED);
    return text;
  }
}

/** Forms by their first {@link INDEX_PREFIX} characters, with a cheap first test on three of them. */
interface PrefixIndex {
  /** {@link threeUnits} of every form's start. */
  starts: Set<number>;
  /** Longest first. */
  forms: Map<string, string[]>;
}

/** Three UTF-16 code units at `at` as one number (below 2^48: exact in a double). */
const threeUnits = (text: string, at: number): number =>
  (text.charCodeAt(at) * 65536 + text.charCodeAt(at + 1)) * 65536 + text.charCodeAt(at + 2);

function indexByPrefix(forms: readonly string[]): PrefixIndex {
  const index: PrefixIndex = { starts: new Set(), forms: new Map() };
  // `forms` is longest first, and so is each list.
  for (const form of forms) {
    index.starts.add(threeUnits(form, 0));
    const prefix = form.slice(0, INDEX_PREFIX);
    const list = index.forms.get(prefix);
    if (list) list.push(form);
    else index.forms.set(prefix, [form]);
  }
  return index;
}

/** One scan of `text`, replacing at each position the longest form that starts there. */
function replaceIndexed(text: string, index: PrefixIndex): string {
  let out: string | undefined;
  let copied = 0;
  for (let at = 0; at + INDEX_PREFIX <= text.length;) {
    const form = index.starts.has(threeUnits(text, at))
      ? index.forms
          .get(text.slice(at, at + INDEX_PREFIX))
          ?.find((candidate) => text.startsWith(candidate, at))
      : undefined;
    if (form === undefined) {
      at += 1;
      continue;
    }
    out = `${out ?? ''}${text.slice(copied, at)}${REDACTED}`;
    at += form.length;
    copied = at;
  }
  return out === undefined ? text : out + text.slice(copied);
}
