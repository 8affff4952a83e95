import { randomUUID } from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import { canonicalJson, HmacSha256Key, sameMac, sha256Hex } from '../../core/crypto.ts';
import type { DerivedKey, TeeStatus } from '@sigil/plugin-api';
import type { BuildInfo } from '../shared/build-info.ts';

/** Where a proof rides in a tool result's `_meta`. */
export const PROOF_META_KEY = 'io.sigil/execution-proof';

export const proofSchema = z
  .object({
    version: z.literal('sigil-proof/1'),
    id: z.string(),
    gateway: z.object({ codeHash: z.string(), gitCommit: z.string() }).strict(),
    server: z
      .object({
        id: z.string(),
        package: z.string(),
        version: z.string(),
        registry: z.string(),
        digest: z.string(),
      })
      .strict(),
    tool: z.string(),
    canonicalization: z.literal('RFC8785'),
    requestHash: z.string(),
    responseHash: z.string(),
    timestamp: z.string(),
    tee: z.object({ enabled: z.boolean(), platform: z.string() }).strict(),
    keySource: z.enum(['sealed', 'config', 'ephemeral']),
    secretNames: z.array(z.string()),
    /** An HMAC per field, so a verifier can name the field that was changed. */
    fieldMacs: z.record(z.string(), z.string()),
    /** HMAC-SHA256 (hex) over the RFC 8785 form of every other field. */
    signature: z.string(),
  })
  .strict();

export type ExecutionProof = z.infer<typeof proofSchema>;
type SignedFields = Omit<ExecutionProof, 'fieldMacs' | 'signature'>;

export interface ProofInput {
  server: ExecutionProof['server'];
  tool: string;
  arguments: Record<string, unknown>;
  /** A 2026-07-28 retry's answers to the server's `input_required`, on which its result depends. */
  inputResponses?: Record<string, unknown>;
  /** The result as the client receives it (already redacted), without the proof. */
  result: CallToolResult;
  secretNames: readonly string[];
}

export interface ProofCheck {
  valid: boolean;
  /** Each field found altered or not matching the given request/response, with why. */
  problems: { field: string; message: string }[];
}

/** The request a proof commits to, as a verifier gives it. */
export interface ProvenRequest {
  serverId: string;
  tool: string;
  arguments: Record<string, unknown>;
  /** Only for the retry of a call that asked for input (MCP 2026-07-28): its `inputResponses`. */
  inputResponses?: Record<string, unknown>;
}

/**
 * The canonical request a proof commits to: `{ serverId, tool, arguments }`, and a retry's
 * `inputResponses` beside them when it has them (the result depends on them): every other request
 * hashes as it always did.
 */
export const requestHash = (
  serverId: string,
  tool: string,
  args: Record<string, unknown>,
  inputResponses?: Record<string, unknown>,
): string =>
  sha256Hex(
    canonicalJson(
      inputResponses === undefined
        ? { serverId, tool, arguments: args }
        : { serverId, tool, arguments: args, inputResponses },
    ),
  );

/**
 * The canonical response a proof commits to: the result without `_meta`, which carries the proof
 * itself, and without MCP 2026-07-28's `resultType: "complete"`, which frames every result of that
 * revision: one proof verifies against the result as either revision delivers it, and proofs of
 * results without it are what they always were.
 */
export function responseHash(result: CallToolResult): string {
  const { _meta: _ignored, ...rest } = result;
  if ((rest as { resultType?: unknown }).resultType === 'complete')
    delete (rest as { resultType?: unknown }).resultType;
  return sha256Hex(canonicalJson(rest));
}

/**
 * What `compute` makes of a value, or undefined when the value has no RFC 8785 form (a lone
 * surrogate, a number beyond a double, nesting too deep to walk): no proof was ever made of one.
 */
function provable(compute: () => string): string | undefined {
  try {
    return compute();
  } catch {
    return undefined;
  }
}

/** A signed field's RFC 8785 form and its MAC. */
interface FieldForm {
  canonical: string;
  mac: string;
}

/** The signed fields that change from call to call; every other one is the same for a server, tool and secret names. */
const PER_CALL_FIELDS = ['id', 'requestHash', 'responseHash', 'timestamp'] as const;
type PerCallField = (typeof PER_CALL_FIELDS)[number];
type Hole = PerCallField | 'fieldMacs';

/** RFC 8785 text with holes where the per-call parts go: `literals` has one more entry than `holes`. */
interface Template {
  literals: string[];
  holes: Hole[];
}

/**
 * The proofs of one server, tool and secret names, prepared once: the field MACs of what does not
 * change from call to call, and the RFC 8785 texts of the field MACs and of the signed object with
 * holes for what does. Signing is on every tool call's path.
 */
interface Layout {
  secretNames: readonly string[];
  /** The form of each field that is not per call. */
  forms: Readonly<Record<string, FieldForm>>;
  macsText: Template;
  signedText: Template;
}

const MAX_LAYOUTS = 4096;
/**
 * The signed fields, and the members the signature covers (those and `fieldMacs`), in RFC 8785 member
 * order: the names are ASCII, so UTF-16 code-unit order is plain string order.
 */
const SIGNED_FIELD_NAMES = Object.keys(proofSchema.shape)
  .filter((name) => name !== 'fieldMacs' && name !== 'signature')
  .sort();
const MAC_INPUT_NAMES = [...SIGNED_FIELD_NAMES, 'fieldMacs'].sort();

const isPerCall = (name: string): name is PerCallField =>
  (PER_CALL_FIELDS as readonly string[]).includes(name);

/** Builds the RFC 8785 text of an object member by member, leaving holes. */
class TemplateBuilder {
  private readonly template: Template = { literals: [''], holes: [] };

  /** A member: its text, or (undefined) a hole, between `quote`s when the hole's value is a string's content. */
  member(name: string, text: string | undefined, hole: Hole, quote: '' | '"' = ''): void {
    const { literals, holes } = this.template;
    // The member names are ASCII without quotes or escapes: JSON and RFC 8785 write them as they are.
    const head = `${literals.length === 1 && literals[0] === '' ? '{' : ','}"${name}":`;
    if (text !== undefined) {
      literals[literals.length - 1] += head + text;
      return;
    }
    literals[literals.length - 1] += head + quote;
    holes.push(hole);
    literals.push(quote);
  }

  build(): Template {
    this.template.literals[this.template.literals.length - 1] += '}';
    return this.template;
  }
}

function fill(template: Template, valueOf: (hole: Hole) => string): string {
  let text = template.literals[0] as string;
  for (let index = 0; index < template.holes.length; index += 1) {
    text += valueOf(template.holes[index] as Hole) + (template.literals[index + 1] as string);
  }
  return text;
}

/** The key of a server, tool and secret names (their strings as a JSON array), or undefined when not all strings. */
function layoutKey(input: ProofInput): string | undefined {
  const { server, tool, secretNames } = input;
  const parts = [server.id, server.package, server.version, server.registry, server.digest];
  if (Object.keys(server).length !== parts.length || !parts.every((part) => typeof part === 'string')) {
    return undefined;
  }
  if (typeof tool !== 'string' || !secretNames.every((name) => typeof name === 'string')) return undefined;
  return JSON.stringify([...parts, tool, ...secretNames]);
}

/**
 * Signs and checks execution proofs with an HMAC key from the TEE backend (sealed where the hardware
 * can seal; the proof says where the key came from).
 */
export class ProofSigner {
  private readonly layouts = new Map<string, Layout>();
  private lastTimestamp: { value: string; form: FieldForm } | undefined;

  private readonly hmac: HmacSha256Key;

  constructor(
    private readonly deps: {
      key: DerivedKey;
      tee: TeeStatus;
      build: Pick<BuildInfo, 'codeHash' | 'gitCommit'>;
      clock: Clock;
    },
  ) {
    this.hmac = new HmacSha256Key(deps.key.key);
  }

  sign(input: ProofInput): ExecutionProof {
    const layout = this.layoutOf(input);
    const id = randomUUID();
    const timestamp = this.deps.clock.now().toISOString();
    const request = requestHash(input.server.id, input.tool, input.arguments, input.inputResponses);
    const response = responseHash(input.result);
    const perCall: Record<PerCallField, FieldForm> = {
      id: this.formOf('id', id),
      requestHash: this.formOf('requestHash', request),
      responseHash: this.formOf('responseHash', response),
      timestamp: this.timestampForm(timestamp),
    };
    // The MACs' text has a hole per per-call field; the signed text one more, for the MACs' text.
    const macsText = fill(layout.macsText, (hole) => perCall[hole as PerCallField].mac);
    const signedText = fill(layout.signedText, (hole) =>
      hole === 'fieldMacs' ? macsText : perCall[hole].canonical,
    );
    const fieldMacs: Record<string, string> = {};
    for (const name of SIGNED_FIELD_NAMES) {
      fieldMacs[name] = (isPerCall(name) ? perCall[name] : (layout.forms[name] as FieldForm)).mac;
    }
    return {
      version: 'sigil-proof/1',
      id,
      gateway: this.gateway(),
      server: input.server,
      tool: input.tool,
      canonicalization: 'RFC8785',
      requestHash: request,
      responseHash: response,
      timestamp,
      tee: this.tee(),
      keySource: this.deps.key.source,
      secretNames: [...layout.secretNames],
      fieldMacs,
      signature: this.hmac.mac(signedText, 'hex'),
    };
  }

  /** Checks the signature and, when given, the request and response the proof claims to cover. */
  verify(
    proof: ExecutionProof,
    against: { request?: ProvenRequest; response?: CallToolResult } = {},
  ): ProofCheck {
    const problems: ProofCheck['problems'] = [];
    const { fieldMacs, signature, ...fields } = proof;
    for (const [name, value] of Object.entries(fields)) {
      const mac = fieldMacs[name];
      const computed = provable(() => this.fieldMac(name, value));
      if (mac === undefined || computed === undefined || !sameMac(mac, computed))
        problems.push({ field: name, message: 'does not match its signature' });
    }
    for (const name of Object.keys(fieldMacs)) {
      if (!(name in fields))
        problems.push({ field: `fieldMacs.${name}`, message: 'names no field of the proof' });
    }
    // Every field intact but the signature wrong: the signature itself was changed.
    if (problems.length === 0 && !sameMac(signature, this.mac({ ...fields, fieldMacs }))) {
      problems.push({ field: 'signature', message: 'the HMAC-SHA256 signature does not match' });
    }
    const { request, response } = against;
    if (
      request &&
      provable(() =>
        requestHash(request.serverId, request.tool, request.arguments, request.inputResponses),
      ) !== proof.requestHash
    ) {
      problems.push({ field: 'requestHash', message: 'does not match the SHA-256 of the given request' });
    }
    if (response && provable(() => responseHash(response)) !== proof.responseHash) {
      problems.push({ field: 'responseHash', message: 'does not match the SHA-256 of the given response' });
    }
    return { valid: problems.length === 0, problems };
  }

  private fieldMac(name: string, value: unknown): string {
    return this.formOf(name, value).mac;
  }

  /** The layout of `input`'s server, tool and secret names: kept, unless they are not all strings. */
  private layoutOf(input: ProofInput): Layout {
    const key = layoutKey(input);
    const kept = key === undefined ? undefined : this.layouts.get(key);
    if (kept) return kept;
    const secretNames = [...input.secretNames].sort();
    const values: Omit<SignedFields, PerCallField> = {
      version: 'sigil-proof/1',
      gateway: this.gateway(),
      server: input.server,
      tool: input.tool,
      canonicalization: 'RFC8785',
      tee: this.tee(),
      keySource: this.deps.key.source,
      secretNames,
    };
    const forms: Record<string, FieldForm> = {};
    for (const [name, value] of Object.entries(values)) forms[name] = this.formOf(name, value);
    const macsText = new TemplateBuilder();
    for (const name of SIGNED_FIELD_NAMES) {
      // base64url: a MAC's JSON form is its RFC 8785 form, the MAC between quotes.
      const mac = forms[name]?.mac;
      macsText.member(name, mac === undefined ? undefined : `"${mac}"`, name as Hole, '"');
    }
    const signedText = new TemplateBuilder();
    for (const name of MAC_INPUT_NAMES) signedText.member(name, forms[name]?.canonical, name as Hole);
    const layout = { secretNames, forms, macsText: macsText.build(), signedText: signedText.build() };
    if (key !== undefined) {
      if (this.layouts.size >= MAX_LAYOUTS) this.layouts.clear();
      this.layouts.set(key, layout);
    }
    return layout;
  }

  /** A field's RFC 8785 form and its MAC, over `name \0 form`. */
  private formOf(name: string, value: unknown): FieldForm {
    const canonical = canonicalJson(value);
    return { canonical, mac: this.hmac.mac(`${name}\0${canonical}`, 'base64url') };
  }

  /** A timestamp's form, kept for the calls signed within the same millisecond (many, on a busy gateway). */
  private timestampForm(timestamp: string): FieldForm {
    if (this.lastTimestamp?.value !== timestamp) {
      this.lastTimestamp = { value: timestamp, form: this.formOf('timestamp', timestamp) };
    }
    return this.lastTimestamp.form;
  }

  private gateway(): SignedFields['gateway'] {
    return { codeHash: this.deps.build.codeHash, gitCommit: this.deps.build.gitCommit };
  }

  private tee(): SignedFields['tee'] {
    return { enabled: this.deps.tee.teeEnabled, platform: this.deps.tee.platform };
  }

  private mac(value: unknown): string {
    return this.hmac.mac(canonicalJson(value), 'hex');
  }
}
