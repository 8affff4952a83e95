import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import { KEY_BYTES, SEALED_PURPOSES, type SealedPurpose } from './keys.ts';
import { failedWith, pcrSelection, TPM_RC, type Tpm, type TpmSession } from './tpm.ts';
import { PCR_BANK } from './verify.ts';

/**
 * Keys sealed to PCRs: a TPM sealed-data object under the owner hierarchy's storage key, whose only
 * authorization is a PolicyPCR over the sha256 values of the chosen PCRs when it was sealed. It
 * unseals on the TPM that sealed it (the blobs are encrypted to its storage key) and only while
 * those PCRs hold those values, that is, after the same boot chain.
 */

/** One file per key in `sealedDir`: the sealed object's public and private parts, and what it is sealed to. */
const sealedFileSchema = z.object({
  format: z.literal('sigil-tee-vtpm-sealed/1'),
  purpose: z.enum(SEALED_PURPOSES),
  /** The PCR values of `bank` the key is sealed to, by index, hex. */
  pcrs: z.object({ bank: z.literal(PCR_BANK), values: z.record(z.string(), z.string()) }),
  /** `TPM2B_PUBLIC` of the sealed object, base64. */
  public: z.string().min(1),
  /** `TPM2B_PRIVATE` of the sealed object, base64 (encrypted to the TPM's storage key). */
  private: z.string().min(1),
  sealedAt: z.string(),
});
type SealedFile = z.infer<typeof sealedFileSchema>;

const sealedPath = (sealedDir: string, purpose: SealedPurpose) => join(sealedDir, `${purpose}.sealed.json`);

/**
 * The storage key the keys are sealed under: the owner hierarchy's ECC P-256 primary key of
 * tpm2-tools' default template, the same every time it is made on one TPM (until the TPM is cleared).
 */
async function storageKey(session: TpmSession): Promise<string> {
  await session.run('tpm2_createprimary', [
    '-C',
    'o',
    '-g',
    'sha256',
    '-G',
    'ecc',
    '-c',
    'primary.ctx',
    '-Q',
  ]);
  return 'primary.ctx';
}

/** The current values of `pcrs` in the sha256 bank. */
async function readPcrs(session: TpmSession, pcrs: readonly number[]): Promise<Map<number, Buffer>> {
  await session.run('tpm2_pcrread', [pcrSelection(PCR_BANK, pcrs), '-o', 'pcrs.bin', '-Q']);
  const values = await session.read('pcrs.bin');
  return new Map(pcrs.map((pcr, at) => [pcr, values.subarray(at * 32, at * 32 + 32)]));
}

export interface SealOptions {
  sealedDir: string;
  pcrs: readonly number[];
  keys: ReadonlyMap<SealedPurpose, Uint8Array>;
  /** Replace sealed keys already in `sealedDir`. */
  force: boolean;
  now: Date;
}

/** Seals each key to the current values of `pcrs` and writes its file; resolves to the values sealed to. */
export async function sealKeys(
  tpm: Tpm,
  options: SealOptions,
): Promise<{ files: Map<SealedPurpose, string>; pcrs: Map<number, Buffer> }> {
  const existing = await Promise.all(
    SEALED_PURPOSES.map((purpose) =>
      readFile(sealedPath(options.sealedDir, purpose)).then(
        () => purpose,
        () => undefined,
      ),
    ),
  );
  const present = existing.filter((purpose) => purpose !== undefined);
  if (present.length > 0 && !options.force)
    throw new SigilError(
      'conflict',
      `${options.sealedDir} already holds sealed keys (${present.join(', ')})`,
      {
        hint: 'sealing again replaces them with new keys (execution proofs and JWTs signed before stop verifying): pass --force to do so',
        details: { reason: 'already_sealed' },
      },
    );
  for (const [purpose, key] of options.keys)
    if (key.length !== KEY_BYTES)
      throw new Error(`the ${purpose} key is ${key.length} bytes, not ${KEY_BYTES}`);
  const selection = pcrSelection(PCR_BANK, options.pcrs);
  const sealed = await tpm.operation(async (session) => {
    const parent = await storageKey(session);
    const pcrs = await readPcrs(session, options.pcrs);
    // The policy of exactly the values recorded in the files, not of whatever the PCRs hold a moment later.
    // prettier-ignore
    await session.run('tpm2_createpolicy', ['--policy-pcr', '-l', selection, '-f', 'pcrs.bin', '-L', 'policy.digest', '-Q']);
    // Its trial session stays loaded (the other tools close theirs): swtpm has three session slots.
    await session.run('tpm2_flushcontext', ['--loaded-session']);
    const files: SealedFile[] = [];
    for (const [purpose, key] of options.keys) {
      // prettier-ignore
      await session.run('tpm2_create', [
        '-C', parent, '-g', 'sha256',
        '-a', 'fixedtpm|fixedparent', // no userwithauth: the PCR policy is the only way to unseal
        '-L', 'policy.digest',
        '-i', '-', // the key on stdin, never in a file
        '-u', `${purpose}.pub`, '-r', `${purpose}.priv`, '-Q',
      ], key);
      files.push({
        format: 'sigil-tee-vtpm-sealed/1',
        purpose,
        pcrs: {
          bank: PCR_BANK,
          values: Object.fromEntries([...pcrs].map(([pcr, value]) => [String(pcr), value.toString('hex')])),
        },
        public: (await session.read(`${purpose}.pub`)).toString('base64'),
        private: (await session.read(`${purpose}.priv`)).toString('base64'),
        sealedAt: options.now.toISOString(),
      });
    }
    return { files, pcrs };
  });
  await mkdir(options.sealedDir, { recursive: true, mode: 0o700 });
  const written = new Map<SealedPurpose, string>();
  for (const file of sealed.files) {
    const path = sealedPath(options.sealedDir, file.purpose);
    await writeFile(`${path}.tmp`, `${JSON.stringify(file, null, 2)}\n`, { mode: 0o600 });
    await rename(`${path}.tmp`, path);
    written.set(file.purpose, path);
  }
  return { files: written, pcrs: sealed.pcrs };
}

function jsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

async function readSealedFile(sealedDir: string, purpose: SealedPurpose): Promise<SealedFile> {
  const path = sealedPath(sealedDir, purpose);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (cause) {
    throw new SigilError('unavailable', `tee-vtpm: no sealed ${purpose} key at ${path}`, {
      hint: 'seal the keys first: sigil tee seal (with the same config)',
      details: { reason: 'not_sealed', purpose },
      cause,
    });
  }
  const parsed = sealedFileSchema.safeParse(jsonOrUndefined(text));
  if (!parsed.success || parsed.data.purpose !== purpose)
    throw new SigilError('unavailable', `tee-vtpm: ${path} is not a sealed ${purpose} key`, {
      details: { reason: 'sealed_file_invalid', purpose },
    });
  return parsed.data;
}

/** Why a sealed key refuses to unseal when the TPM says its policy failed: which PCRs changed. */
async function pcrMismatch(session: TpmSession, file: SealedFile, sealedDir: string): Promise<SigilError> {
  const sealedTo = new Map(Object.entries(file.pcrs.values).map(([pcr, value]) => [Number(pcr), value]));
  const now = await readPcrs(session, [...sealedTo.keys()]);
  const changed = [...sealedTo]
    .filter(([pcr, value]) => now.get(pcr)?.toString('hex') !== value)
    .map(([pcr]) => pcr);
  const which =
    changed.length === 0
      ? `its PCR policy failed although PCR ${[...sealedTo.keys()].join(',')} hold the values recorded in ${sealedPath(sealedDir, file.purpose)}`
      : `PCR ${changed.map((pcr) => `${pcr} (now ${now.get(pcr)?.toString('hex')}, sealed to ${sealedTo.get(pcr)})`).join(', ')} changed since it was sealed at ${file.sealedAt}`;
  return new SigilError(
    'unavailable',
    `tee-vtpm: the sealed ${file.purpose} key refuses to unseal: ${which}`,
    {
      hint: 'the boot chain measured into these PCRs (firmware, boot loader, kernel, Secure Boot) is not the one the keys were sealed under; if the change is intended, seal again (sigil tee seal --force, with the keys in the environment to keep them)',
      details: { reason: 'pcr_mismatch', purpose: file.purpose, bank: PCR_BANK, pcrs: changed },
    },
  );
}

/** Unseals every sealed key from `sealedDir`; refuses (SigilError `unavailable`) rather than fall back to another key. */
export async function unsealKeys(tpm: Tpm, sealedDir: string): Promise<Map<SealedPurpose, Uint8Array>> {
  // In order, so a missing key is named the same way every time: the first purpose missing.
  const files: SealedFile[] = [];
  for (const purpose of SEALED_PURPOSES) files.push(await readSealedFile(sealedDir, purpose));
  return tpm.operation(async (session) => {
    const parent = await storageKey(session);
    const keys = new Map<SealedPurpose, Uint8Array>();
    for (const file of files) {
      await session.write('sealed.pub', Buffer.from(file.public, 'base64'));
      await session.write('sealed.priv', Buffer.from(file.private, 'base64'));
      try {
        // prettier-ignore
        await session.run('tpm2_load', ['-C', parent, '-u', 'sealed.pub', '-r', 'sealed.priv', '-c', 'sealed.ctx', '-Q']);
      } catch (cause) {
        if (!failedWith(cause, TPM_RC.integrity)) throw cause;
        throw new SigilError(
          'unavailable',
          `tee-vtpm: the sealed ${file.purpose} key does not load: it was sealed on another TPM, or this TPM's owner hierarchy was cleared since`,
          {
            hint: 'seal the keys on this machine: sigil tee seal --force',
            details: { reason: 'sealed_elsewhere', purpose: file.purpose },
            cause,
          },
        );
      }
      const pcrs = Object.keys(file.pcrs.values).map(Number);
      let key: Buffer;
      try {
        // The policy session the PCR authorization (`pcr:`) starts is the only way this object unseals.
        key = await session.run('tpm2_unseal', [
          '-c',
          'sealed.ctx',
          '-p',
          `pcr:${pcrSelection(PCR_BANK, pcrs)}`,
        ]);
      } catch (cause) {
        if (failedWith(cause, TPM_RC.policyFail)) throw await pcrMismatch(session, file, sealedDir);
        throw cause;
      }
      if (key.length !== KEY_BYTES)
        throw new Error(`the sealed ${file.purpose} key is ${key.length} bytes, not ${KEY_BYTES}`);
      keys.set(file.purpose, new Uint8Array(key));
    }
    return keys;
  });
}
