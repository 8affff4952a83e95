import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * An exclusive lock on one TPM across the processes of this machine (the runtime and the gateway run
 * as two): flock(1) of util-linux holds it for as long as its stdin stays open, so the kernel drops it
 * when the holder ends, even when this process dies without releasing it.
 *
 * Why a lock: the swtpm TCTI connects once per command, so the commands of two processes interleave,
 * and swtpm, with no resource manager, lets one process's flush of transient objects unload an object
 * another process's tool is using (TPM_RC_REFERENCE_H0). Under /dev/tpmrm0 each connection has its own
 * objects and the lock only orders operations.
 */
export function lockPathFor(tcti: string): string {
  return join(tmpdir(), `sigil-vtpm-${createHash('sha256').update(tcti).digest('hex').slice(0, 16)}.lock`);
}

/** Resolves once the lock on `path` is held, to its release. */
export function acquireLock(path: string): Promise<() => Promise<void>> {
  return new Promise((resolve, reject) => {
    const holder = spawn('flock', ['--exclusive', path, '--command', 'echo locked; exec cat >/dev/null'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    holder.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const closed = new Promise<void>((done) => holder.once('close', () => done()));
    const notHeld = (code: number | null) =>
      reject(new Error(`flock ${path} exited with ${code}: ${stderr.trim()}`));
    holder.once('error', reject);
    holder.once('close', notHeld);
    holder.stdout.once('data', () => {
      holder.off('close', notHeld);
      resolve(() => {
        holder.stdin.end();
        return closed;
      });
    });
  });
}
