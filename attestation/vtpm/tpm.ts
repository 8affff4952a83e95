import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SigilError } from '@sigil/plugin-api';
import { acquireLock, lockPathFor } from './tpm-lock.ts';

/**
 * The TPM, through Debian's tpm2-tools. Chosen over a TPM library: tss.js, the one TPM 2.0 stack on
 * npm, is unmaintained, while tpm2-tools is kept by the tpm2-software project, packaged by Debian,
 * and speaks to a device (`device:/dev/tpmrm0`) and to swtpm (`swtpm:host=…,port=…`) alike, by
 * the TCTI string.
 *
 * Each operation runs in a private temporary folder and alone in this process. Objects pass between
 * tools as saved context files, which each tool loads again, so nothing needs to stay loaded between
 * two tools. swtpm has no resource manager and three object slots: every object a tool loads stays
 * loaded, so transient objects are flushed after each tool (under /dev/tpmrm0 the kernel flushes
 * them and these flushes find nothing). Operations of other processes on the same TPM wait on a
 * lock (tpm-lock.ts), so no flush of theirs unloads an object one of ours is using.
 */

/** The tool's own `ERROR:` lines (the TSS's log is silenced: TSS2_LOG below), or its last line. */
const errorLines = (text: string): string => {
  const lines = text.trim().split('\n');
  const errors = lines
    .filter((line) => line.startsWith('ERROR'))
    .map((line) => line.replace(/^ERROR:\s*/, ''));
  return errors.length > 0 ? errors.join('; ') : (lines.at(-1) ?? '');
};

/** The response code tpm2-tools prints as `ERROR: Esys_Unseal(0x99D) - …` (or `Eys_Load(0x1DF)`). */
function responseCodeOf(stderr: string): number | undefined {
  const code = /^ERROR: \w+\((0x[0-9a-fA-F]+)\) - /m.exec(stderr)?.[1];
  return code === undefined ? undefined : Number.parseInt(code, 16);
}

/** What a tool failed with: its exit and the TPM's response code when it printed one. */
export class TpmToolError extends Error {
  constructor(
    readonly tool: string,
    readonly stderr: string,
    /** The TPM_RC it printed (e.g. 0x99d, a policy check failed), when it did. */
    readonly responseCode: number | undefined,
  ) {
    super(`${tool}: ${errorLines(stderr) || 'failed without a message'}`);
  }
}

/** Format-one response codes (TPM 2.0 Part 2, 6.6.3), without the parameter, handle or session number. */
export const TPM_RC = {
  /** The value of a parameter has the wrong size: qualifying data larger than the TPM's largest digest. */
  size: 0x095,
  /** The policy's PCRs differ from their values now. */
  policyFail: 0x09d,
  /** A sealed blob does not decrypt under this parent: another TPM's, or a cleared hierarchy's. */
  integrity: 0x09f,
} as const;

/** Whether a tool failed with the format-one response code `code`, whichever parameter or session it names. */
export const failedWith = (error: unknown, code: number): boolean =>
  error instanceof TpmToolError &&
  error.responseCode !== undefined &&
  (error.responseCode & 0x80) !== 0 &&
  (error.responseCode & 0xbf) === code;

/**
 * `TPM_RC_OBJECT_MEMORY` and `TPM_RC_SESSION_MEMORY`: no slot free, when a process died in the middle
 * of an operation and left its objects loaded; flushing them and trying again gets a slot.
 */
const OUT_OF_SLOTS = new Set([0x902, 0x903]);
const TOOL_ATTEMPTS = 3;

/** The tools one operation uses, working in its folder. */
export interface TpmSession {
  /** Runs one tool (`tpm2_quote`, …) in the folder with `args`, `input` on its stdin; resolves to its stdout. */
  run(tool: string, args: readonly string[], input?: Uint8Array): Promise<Buffer>;
  read(name: string): Promise<Buffer>;
  write(name: string, data: Uint8Array): Promise<void>;
}

export class Tpm {
  private queue: Promise<unknown> = Promise.resolve();
  private readonly lockPath: string;

  constructor(readonly tcti: string) {
    this.lockPath = lockPathFor(tcti);
  }

  /**
   * Runs one TPM operation alone on this TPM (queued in this process, locked against the others), in
   * a private folder removed afterwards. A tool missing or the TPM unreachable is a SigilError
   * `unavailable`.
   */
  operation<T>(work: (session: TpmSession) => Promise<T>): Promise<T> {
    const next = this.queue.then(() => this.locked(work));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async locked<T>(work: (session: TpmSession) => Promise<T>): Promise<T> {
    const release = await acquireLock(this.lockPath);
    try {
      return await this.inFolder(work);
    } finally {
      await release();
    }
  }

  private async inFolder<T>(work: (session: TpmSession) => Promise<T>): Promise<T> {
    const dir = await mkdtemp(join(tmpdir(), 'sigil-vtpm-'));
    const session: TpmSession = {
      run: async (tool, args, input) => {
        for (let attempt = 1; ; attempt += 1) {
          try {
            return await this.tool(tool, args, dir, input);
          } catch (err) {
            const outOfSlots = err instanceof TpmToolError && OUT_OF_SLOTS.has(err.responseCode ?? 0);
            if (!outOfSlots || attempt === TOOL_ATTEMPTS) throw err;
            await this.flush(dir, '--loaded-session');
          } finally {
            await this.flush(dir, '--transient-object');
          }
        }
      },
      read: (name) => readFile(join(dir, name)),
      write: (name, data) => writeFile(join(dir, name), data, { mode: 0o600 }),
    };
    try {
      return await work(session);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  private flush(dir: string, what: '--transient-object' | '--loaded-session'): Promise<unknown> {
    return this.tool('tpm2_flushcontext', [what], dir).catch(() => undefined);
  }

  private tool(tool: string, args: readonly string[], cwd: string, input?: Uint8Array): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const child = spawn(tool, args, {
        cwd,
        env: { ...process.env, TPM2TOOLS_TCTI: this.tcti, TSS2_LOG: 'all+none' },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const stdout: Buffer[] = [];
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('error', (err: NodeJS.ErrnoException) =>
        reject(
          err.code === 'ENOENT'
            ? new SigilError('unavailable', `tee-vtpm: ${tool} is not installed`, {
                hint: 'install tpm2-tools (Debian: apt-get install tpm2-tools)',
                details: { reason: 'tpm2_tools_missing' },
                cause: err,
              })
            : err,
        ),
      );
      child.on('close', (code) => {
        if (code === 0) return resolve(Buffer.concat(stdout));
        reject(this.failure(tool, stderr));
      });
      // A tool that exits without reading its input closes the pipe: its exit code says what happened.
      child.stdin.on('error', () => undefined);
      child.stdin.end(input === undefined ? undefined : Buffer.from(input));
    });
  }

  /** A TPM that cannot be reached is `unavailable` with the TCTI; anything else is the tool's error. */
  private failure(tool: string, stderr: string): Error {
    if (/Could not load tcti/.test(stderr))
      return new SigilError('unavailable', `tee-vtpm: cannot reach the TPM at ${this.tcti}`, {
        hint: 'check the tcti option: device:/dev/tpmrm0 on a machine with a TPM, swtpm:host=…,port=… for swtpm',
        details: { reason: 'tpm_unreachable', tool },
        cause: new TpmToolError(tool, stderr, undefined),
      });
    return new TpmToolError(tool, stderr, responseCodeOf(stderr));
  }
}

/** `sha256:0,2,4,7`: a PCR selection as tpm2-tools takes it. */
export const pcrSelection = (bank: string, pcrs: readonly number[]): string => `${bank}:${pcrs.join(',')}`;
