import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SigilError } from '@sigil/plugin-api';

/**
 * The TPM, through Debian's tpm2-tools. Chosen over a TPM library: tss.js, the one TPM 2.0 stack on
 * npm, is unmaintained, while tpm2-tools is kept by the tpm2-software project, packaged by Debian,
 * and speaks to a device (`device:/dev/tpmrm0`) and to swtpm (`swtpm:host=…,port=…`) alike, by
 * the TCTI string.
 *
 * Each operation runs in a private temporary folder (objects pass between tools as context files)
 * and alone in this process. swtpm has no resource manager and few object slots: every object a tool
 * loads stays loaded, so transient objects are flushed after each tool (under /dev/tpmrm0 the kernel
 * flushes them and these flushes find nothing).
 */

/** The tool's own `ERROR:` lines (the TSS's log is silenced: TSS2_LOG below), or its last line. */
const errorLines = (text: string): string => {
  const lines = text.trim().split('\n');
  const errors = lines
    .filter((line) => line.startsWith('ERROR'))
    .map((line) => line.replace(/^ERROR:\s*/, ''));
  return errors.length > 0 ? errors.join('; ') : (lines.at(-1) ?? '');
};

/** The response code tpm2-tools prints as `Esys_X(0x99D)` or `ErrorCode (0x0000099d)`. */
function responseCodeOf(stderr: string): number | undefined {
  const match = /Esys_\w+\((0x[0-9a-fA-F]+)\)|ErrorCode \((0x[0-9a-fA-F]+)\)/.exec(stderr);
  const code = match?.[1] ?? match?.[2];
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

/** `TPM_RC_POLICY_FAIL` as a session's error (format 1, session 1): the PCRs differ from the policy's. */
export const TPM_RC_POLICY_FAIL_SESSION_1 = 0x99d;

/** The tools one operation uses, working in its folder. */
export interface TpmSession {
  /** Runs one tool (`tpm2_quote`, …) with `args`, `input` on its stdin; resolves to its stdout. */
  run(tool: string, args: readonly string[], input?: Uint8Array): Promise<Buffer>;
  /** A path in the operation's folder. */
  path(name: string): string;
  read(name: string): Promise<Buffer>;
  write(name: string, data: Uint8Array): Promise<void>;
}

export class Tpm {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(readonly tcti: string) {}

  /**
   * Runs one TPM operation alone in this process, in a private folder removed afterwards. A tool
   * missing or the TPM unreachable is a SigilError `unavailable`.
   */
  operation<T>(work: (session: TpmSession) => Promise<T>): Promise<T> {
    const next = this.queue.then(() => this.inFolder(work));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async inFolder<T>(work: (session: TpmSession) => Promise<T>): Promise<T> {
    const dir = await mkdtemp(join(tmpdir(), 'sigil-vtpm-'));
    const session: TpmSession = {
      run: async (tool, args, input) => {
        try {
          return await this.tool(tool, args, dir, input);
        } finally {
          await this.tool('tpm2_flushcontext', ['--transient-object'], dir).catch(() => undefined);
        }
      },
      path: (name) => join(dir, name),
      read: (name) => readFile(join(dir, name)),
      write: (name, data) => writeFile(join(dir, name), data, { mode: 0o600 }),
    };
    try {
      return await work(session);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
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
