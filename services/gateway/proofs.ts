import { randomUUID } from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import { canonicalJson, hmacSha256Text, sameMac, sha256Hex } from '../../core/crypto.ts';
import type { DerivedKey, TeeStatus } from '../../core/plugins/contracts/index.ts';
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
  /** The result as the client receives it (already redacted), without the proof. */
  result: CallToolResult;
  secretNames: readonly string[];
}

export interface ProofCheck {
  valid: boolean;
  /** Each field found altered or not matching the given request/response, with why. */
  problems: { field: string; message: string }[];
}

/** The canonical request a proof commits to. */
export const requestHash = (serverId: string, tool: string, args: Record<string, unknown>): string =>
  sha256Hex(canonicalJson({ serverId, tool, arguments: args }));

/** The canonical response a proof commits to: the result without `_meta`, which carries the proof itself. */
export function responseHash(result: CallToolResult): string {
  const { _meta: _ignored, ...rest } = result;
  return sha256Hex(canonicalJson(rest));
}

/** A signed field's RFC 8785 form and its MAC. */
interface FieldForm {
  canonical: string;
  mac: string;
}

const MAX_REPEATING_FORMS = 4096;
/**
 * The signed fields, and the members the signature covers (those and `fieldMacs`), in RFC 8785 member
 * order: the names are ASCII, so UTF-16 code-unit order is plain string order.
 */
const SIGNED_FIELD_NAMES = Object.keys(proofSchema.shape)
  .filter((name) => name !== 'fieldMacs' && name !== 'signature')
  .sort();
const MAC_INPUT_NAMES = [...SIGNED_FIELD_NAMES, 'fieldMacs'].sort();

/** The key of a repeating field's value (its strings as a JSON array), or undefined for a field that does not repeat. */
function repeatingKey(name: string, value: unknown): string | undefined {
  if (name === 'tool' && typeof value === 'string') return JSON.stringify([name, value]);
  if (name === 'secretNames' && Array.isArray(value) && value.every((item) => typeof item === 'string'))
    return JSON.stringify([name, ...(value as string[])]);
  if (name === 'server' && typeof value === 'object' && value !== null) {
    const server = value as ExecutionProof['server'];
    const parts = [server.id, server.package, server.version, server.registry, server.digest];
    if (Object.keys(server).length === parts.length && parts.every((part) => typeof part === 'string'))
      return JSON.stringify([name, ...parts]);
  }
  return undefined;
}

/**
 * Signs and checks execution proofs with an HMAC key from the TEE backend (sealed where the hardware
 * can seal; the proof says where the key came from).
 */
export class ProofSigner {
  /**
   * The RFC 8785 form and MAC of each field that is the same in every proof of this signer, computed
   * once: signing is on every tool call's path.
   */
  private readonly shared: ReadonlyMap<string, FieldForm>;
  private readonly repeating = new Map<string, FieldForm>();
  private lastTimestamp: { value: string; form: FieldForm } | undefined;

  constructor(private readonly deps: { key: DerivedKey; tee: TeeStatus; build: BuildInfo; clock: Clock }) {
    const shared: Partial<SignedFields> = {
      version: 'sigil-proof/1',
      gateway: this.gateway(),
      canonicalization: 'RFC8785',
      tee: this.tee(),
      keySource: deps.key.source,
    };
    this.shared = new Map(
      Object.entries(shared).map(([name, value]) => {
        const canonical = canonicalJson(value);
        return [name, { canonical, mac: this.macOfCanonical(name, canonical) }];
      }),
    );
  }

  sign(input: ProofInput): ExecutionProof {
    const fields: SignedFields = {
      version: 'sigil-proof/1',
      id: randomUUID(),
      gateway: this.gateway(),
      server: input.server,
      tool: input.tool,
      canonicalization: 'RFC8785',
      requestHash: requestHash(input.server.id, input.tool, input.arguments),
      responseHash: responseHash(input.result),
      timestamp: this.deps.clock.now().toISOString(),
      tee: this.tee(),
      keySource: this.deps.key.source,
      secretNames: [...input.secretNames].sort(),
    };
    // The same MACs and signature as fieldMac() and mac() give, from each field's canonical form once,
    // joined in RFC 8785 member order without sorting on every call.
    const fieldMacs: Record<string, string> = {};
    const members: Record<string, string> = {};
    let macsObject = '';
    for (const name of SIGNED_FIELD_NAMES) {
      const { canonical, mac } =
        this.shared.get(name) ??
        (name === 'timestamp'
          ? this.timestampForm(fields.timestamp)
          : this.formOf(name, fields[name as keyof SignedFields]));
      members[name] = canonical;
      fieldMacs[name] = mac;
      // base64url: its JSON form is its RFC 8785 form.
      macsObject += `${macsObject === '' ? '{' : ','}"${name}":"${mac}"`;
    }
    members.fieldMacs = `${macsObject}}`;
    let signedObject = '';
    for (const name of MAC_INPUT_NAMES)
      signedObject += `${signedObject === '' ? '{' : ','}"${name}":${members[name] as string}`;
    const signature = hmacSha256Text(this.deps.key.key, `${signedObject}}`, 'hex');
    return { ...fields, fieldMacs, signature };
  }

  /** Checks the signature and, when given, the request and response the proof claims to cover. */
  verify(
    proof: ExecutionProof,
    against: {
      request?: { serverId: string; tool: string; arguments: Record<string, unknown> };
      response?: CallToolResult;
    } = {},
  ): ProofCheck {
    const problems: ProofCheck['problems'] = [];
    const { fieldMacs, signature, ...fields } = proof;
    for (const [name, value] of Object.entries(fields)) {
      const mac = fieldMacs[name];
      if (mac === undefined || !sameMac(mac, this.fieldMac(name, value)))
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
    if (
      against.request &&
      requestHash(against.request.serverId, against.request.tool, against.request.arguments) !==
        proof.requestHash
    ) {
      problems.push({ field: 'requestHash', message: 'does not match the SHA-256 of the given request' });
    }
    if (against.response && responseHash(against.response) !== proof.responseHash) {
      problems.push({ field: 'responseHash', message: 'does not match the SHA-256 of the given response' });
    }
    return { valid: problems.length === 0, problems };
  }

  private fieldMac(name: string, value: unknown): string {
    return this.macOfCanonical(name, canonicalJson(value));
  }

  /**
   * A field's RFC 8785 form and MAC. Those of fields whose values repeat from call to call (server,
   * tool, secret names) are kept, found by a key built from their strings without canonicalizing.
   */
  private formOf(name: string, value: unknown): FieldForm {
    const key = repeatingKey(name, value);
    const kept = key === undefined ? undefined : this.repeating.get(key);
    if (kept) return kept;
    const canonical = canonicalJson(value);
    const form = { canonical, mac: this.macOfCanonical(name, canonical) };
    if (key !== undefined) {
      if (this.repeating.size >= MAX_REPEATING_FORMS) this.repeating.clear();
      this.repeating.set(key, form);
    }
    return form;
  }

  /** A timestamp's form, kept for the calls signed within the same millisecond (many, on a busy gateway). */
  private timestampForm(timestamp: string): FieldForm {
    if (this.lastTimestamp?.value !== timestamp) {
      const canonical = canonicalJson(timestamp);
      this.lastTimestamp = {
        value: timestamp,
        form: { canonical, mac: this.macOfCanonical('timestamp', canonical) },
      };
    }
    return this.lastTimestamp.form;
  }

  private macOfCanonical(name: string, canonical: string): string {
    return hmacSha256Text(this.deps.key.key, `${name}\0${canonical}`, 'base64url');
  }

  private gateway(): SignedFields['gateway'] {
    return { codeHash: this.deps.build.codeHash, gitCommit: this.deps.build.gitCommit };
  }

  private tee(): SignedFields['tee'] {
    return { enabled: this.deps.tee.teeEnabled, platform: this.deps.tee.platform };
  }

  private mac(value: unknown): string {
    return hmacSha256Text(this.deps.key.key, canonicalJson(value), 'hex');
  }
}
