import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, watch } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { lockPathFor } from '../../attestation/vtpm/tpm-lock.ts';
import { freePort } from './cli.ts';
import { ensureDebianPrograms } from './debian.ts';

/**
 * A real TPM 2.0 for tests: Debian's swtpm (libtpms, IBM's reference code), with tpm2-tools to talk
 * to it, both installed with apt-get when missing (CI runs as root). Each {@link startSwtpm} is a
 * TPM of its own: a state folder (its seeds, so what is sealed under it stays sealed under it across
 * a restart) and a pair of free ports, server and control (the swtpm TCTI takes the control port to
 * be the server's plus one).
 *
 *     const tpm = await startSwtpm();
 *     … tee-vtpm with { tcti: tpm.tcti } …
 *     await tpm.extendPcr(7);          // a changed boot
 *     const again = await tpm.restart(); // PCRs back to zero, the same seeds
 *     await again.stop();
 */

export interface Swtpm {
  /** What tpm2-tools and the plugin's `tcti` option take: `swtpm:host=127.0.0.1,port=N`. */
  tcti: string;
  stateDir: string;
  /** Runs a tpm2-tools program against this TPM; resolves to its stdout. */
  tool(program: string, args: readonly string[]): string;
  /** Extends a sha256 PCR with a digest, as a boot that measured something else would. */
  extendPcr(pcr: number, digest?: string): void;
  /** The same TPM rebooted: stopped, then started on its state folder (PCRs reset, seeds kept). */
  restart(): Promise<Swtpm>;
  /** Stops swtpm; the state folder stays until {@link Swtpm.remove}. */
  stop(): Promise<void>;
  /** Stops swtpm and removes its state folder (and tee-vtpm's lock file of its TCTI). */
  remove(): Promise<void>;
}

/** The program of each package the tests need. */
const PACKAGES = [
  ['/usr/bin/swtpm', 'swtpm'],
  ['/usr/bin/tpm2_quote', 'tpm2-tools'],
] as const;

/** apt-get only when a program is missing: these machines may have them, a fresh CI machine may not. */
export function installTpmPackages(): void {
  ensureDebianPrograms('the TPM tests', PACKAGES);
}

/**
 * Resolves once `path` exists (swtpm writes its pid file after its sockets listen), or with the exit
 * code when swtpm ends first.
 */
function created(path: string, child: ChildProcess): Promise<{ code: number | null } | undefined> {
  return new Promise((resolve) => {
    const watcher = watch(join(path, '..'), () => {
      if (existsSync(path)) done();
    });
    // On `close`, not `exit`: by then swtpm's output has been read, and it says why.
    const onClose = (code: number | null) => {
      watcher.close();
      resolve({ code });
    };
    const done = () => {
      watcher.close();
      child.off('close', onClose);
      resolve(undefined);
    };
    child.once('close', onClose);
    if (existsSync(path)) done();
  });
}

/** What swtpm says when a port it was given was taken between our check and its bind. */
const PORT_TAKEN = 'Address already in use';
/** Port pairs tried before a start fails: another test process may take a free port meanwhile. */
const PORT_ATTEMPTS = 5;

/** Starts swtpm on `stateDir` (a new folder by default); rejects with its output when it fails. */
export async function startSwtpm(stateDir = mkdtempSync(join(tmpdir(), 'sigil-swtpm-'))): Promise<Swtpm> {
  installTpmPackages();
  for (let attempt = 1; ; attempt++) {
    const launched = await launchSwtpm(stateDir);
    if ('started' in launched) return launched.started;
    if (!launched.output.includes(PORT_TAKEN) || attempt === PORT_ATTEMPTS)
      throw new Error(`swtpm exited with ${launched.code} before it listened:\n${launched.output}`);
  }
}

/** One start on a fresh pair of free ports: the TPM, or how swtpm ended before it listened. */
async function launchSwtpm(
  stateDir: string,
): Promise<{ started: Swtpm } | { code: number | null; output: string }> {
  // The swtpm TCTI takes the control port to be the server's plus one.
  const port = await freePort(2);
  const runDir = mkdtempSync(join(tmpdir(), 'sigil-swtpm-run-'));
  const pidFile = join(runDir, 'swtpm.pid');
  const child = spawn(
    'swtpm',
    [
      'socket',
      '--tpm2',
      '--server',
      `type=tcp,port=${port},bindaddr=127.0.0.1`,
      '--ctrl',
      `type=tcp,port=${port + 1},bindaddr=127.0.0.1`,
      '--tpmstate',
      `dir=${stateDir}`,
      '--pid',
      `file=${pidFile}`,
      '--flags',
      'not-need-init,startup-clear',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const ended = await created(pidFile, child);
  if (ended) {
    rmSync(runDir, { recursive: true, force: true });
    return { code: ended.code, output };
  }
  const tcti = `swtpm:host=127.0.0.1,port=${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(runDir, { recursive: true, force: true });
  };
  const tool = (program: string, args: readonly string[]) =>
    execFileSync(program, args, { env: { ...process.env, TPM2TOOLS_TCTI: tcti }, encoding: 'utf8' });
  const started: Swtpm = {
    tcti,
    stateDir,
    tool,
    extendPcr: (pcr, digest = 'ab'.repeat(32)) => {
      tool('tpm2_pcrextend', [`${pcr}:sha256=${digest}`]);
    },
    restart: async () => {
      await stop();
      return startSwtpm(stateDir);
    },
    stop,
    remove: async () => {
      await stop();
      rmSync(stateDir, { recursive: true, force: true });
      rmSync(lockPathFor(tcti), { force: true });
    },
  };
  return { started };
}
