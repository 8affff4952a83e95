import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Writes a file so that after a crash it holds either its old content or the new, never a mix: write a
 * temporary file (mode 0600), fsync it, rename it over the target, fsync the directory.
 */
export function writeFileDurably(file: string, content: string | Uint8Array): void {
  const temporary = `${file}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    writeFileSync(temporary, content, { mode: 0o600 });
    const fd = openSync(temporary, 'r+');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, file);
  } catch (err) {
    rmSync(temporary, { force: true });
    throw err;
  }
  fsyncDirectory(dirname(file));
}

/** Removes a file (absent is fine) and makes the removal durable. */
export function removeFileDurably(file: string): void {
  rmSync(file, { force: true });
  fsyncDirectory(dirname(file));
}

/** The file's content, or undefined when it does not exist; other errors (permissions, I/O) throw. */
export function readFileIfExists(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

export function fsyncDirectory(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
