import { readFileSync } from 'node:fs';
import { SigilError, type AttestationEvidenceV2 } from '@sigil/plugin-api';
import {
  BUILTIN_PLATFORMS,
  type BuiltinPlatform,
} from '../../services/shared/offline-verification/builtin-platforms.ts';

/**
 * What `sigil attestation verify` reads: files, each recognised by its content as one kind of input
 * (a report, a quote, evidence as JSON) or as material that goes with one (certificates, collateral).
 */

/** The platforms whose evidence the command verifies, each with its plugin's verifier. */
export const PLATFORMS = BUILTIN_PLATFORMS;
export type Platform = BuiltinPlatform;

export const isPlatform = (name: string): name is Platform => (PLATFORMS as readonly string[]).includes(name);

/** A file as read once, seen every way a kind of input may need it. */
export interface InputFile {
  path: string;
  /** The file's bytes, or the bytes it spells when it is hex text (`xxd -p`, a hex string). */
  bytes: Buffer;
  text: string;
  /** Its value when the file is JSON, else undefined. */
  json: unknown;
}

/** Which file was taken as what, as the command prints it. */
export interface TakenFile {
  path: string;
  as: string;
}

/** Evidence made of the files, and what each of them was taken as. */
export interface AssembledEvidence {
  evidence: AttestationEvidenceV2;
  files: TakenFile[];
}

/** One kind of file that is evidence, alone or with the files given beside it. */
export interface EvidenceKind {
  /** What such a file is, as shown: `SEV-SNP report`. */
  name: string;
  /** The platform of its evidence; undefined for a document that names its own. */
  platform?: Platform;
  /** Whether `file` is one, by its content. */
  matches(file: InputFile): boolean;
  /** The evidence it makes with `others` (its certificates, its collateral…); throws {@link unusable}. */
  assemble(file: InputFile, others: readonly InputFile[]): AssembledEvidence;
}

/**
 * Input the command cannot use (unreadable, of no kind it knows, ambiguous): exit 2, where evidence
 * that fails a check exits 1.
 */
export const unusable = (message: string, reason: string, hint?: string): SigilError =>
  new SigilError('invalid_request', message, {
    details: { reason },
    ...(hint === undefined ? {} : { hint }),
  });

/** A file given beside evidence that is none of what goes with it. */
export const notMaterialOf = (file: InputFile, evidence: string, expected: string): SigilError =>
  unusable(`${file.path}: not a file that goes with a ${evidence}`, 'unknown_format', `expected ${expected}`);

/** Collateral by name, refusing a second file for a name already given. */
export class CollateralFiles {
  readonly collateral: Record<string, string> = {};
  private readonly from = new Map<string, string>();

  put(names: readonly string[], value: string, file: InputFile): void {
    for (const name of names) {
      const earlier = this.from.get(name);
      if (earlier !== undefined)
        throw unusable(`${earlier} and ${file.path} are both the ${name}: give one`, 'ambiguous_input');
      this.from.set(name, file.path);
      this.collateral[name] = value;
    }
  }
}

const HEX_TEXT = /^[0-9a-fA-F\s]+$/;

function jsonOf(text: string): unknown {
  if (!/^\s*[[{]/.test(text)) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export function readInputFile(path: string): InputFile {
  let raw: Buffer;
  try {
    raw = readFileSync(path);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw unusable(`${path}: cannot be read (${reason})`, 'unreadable');
  }
  const text = raw.toString('utf8');
  const digits = HEX_TEXT.test(text) ? text.replace(/\s/g, '') : '';
  return {
    path,
    bytes: digits.length > 0 && digits.length % 2 === 0 ? Buffer.from(digits, 'hex') : raw,
    text,
    json: jsonOf(text),
  };
}

/** What `read` returns, or undefined when it throws: how a file is tried as one structure after another. */
export function tryRead<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/** Whether `parse` succeeds: how a binary structure is recognised. */
export const parses = (parse: () => object): boolean => tryRead(parse) !== undefined;

export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
