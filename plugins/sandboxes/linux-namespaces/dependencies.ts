import { execFile } from 'node:child_process';
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { basename, isAbsolute, join } from 'node:path';
import { promisify } from 'node:util';
import { SigilError } from '@sigil/plugin-api';
import { DEFAULT_PATH } from './host.ts';

/**
 * What a program needs of the host to run in a sandbox whose root holds only chosen files: for an
 * ELF file, its shared libraries and the dynamic loader, as ldd(1) lists them; for a script, the
 * interpreter its `#!` line names (through `env` too) and that interpreter's own. Read once per file
 * (and again only if the file is replaced) and cached for the life of the runtime.
 *
 * ldd asks the system's loader (glibc's `ld.so --list`, musl's `ld-musl`) rather than running the
 * program, and runs none of its code: it is how the loader itself would resolve them, search paths,
 * RPATH and ld.so.cache included. Libraries a program opens later by name (dlopen) are not listed;
 * they go in `readOnlyPaths`.
 */

const run = promisify(execFile);
const ELF_MAGIC = '\x7fELF';
/** Longest `#!` line the kernel reads (BINPRM_BUF_SIZE). */
const SHEBANG_BYTES = 256;

/** Files per ldd run when many are listed (each costs ldd a run of the loader anyway). */
const LDD_BATCH = 100;

/** One `ldd` line naming a file: `libc.so.6 => /lib/.../libc.so.6 (0x…)` or `/lib64/ld-linux….so.2 (0x…)`. */
const LDD_PATH = /^\s*(?:\S+\s+=>\s+)?(\/\S+)\s+\(0x[0-9a-f]+\)\s*$/;

export class Dependencies {
  private readonly cache = new Map<string, Promise<readonly string[]>>();

  constructor(private readonly ldd: string) {}

  /**
   * `files` with everything each one needs to run (missing files and directories are given back
   * as they are: the root plan says whether they may be missing).
   */
  async of(files: readonly string[]): Promise<string[]> {
    const needed = await Promise.all(files.map((file) => this.ofFile(file)));
    return [...new Set([...files, ...needed.flat()])];
  }

  /**
   * Starts looking up what `files` need, in the background (ldd runs in a process of its own): the
   * spawn that asks next finds the answer cached or under way. A failure is asked again then.
   */
  prefetch(files: readonly string[]): void {
    this.of(files).catch(() => undefined);
  }

  /** Whether what `file` (as it is now) needs is cached or being looked up. */
  known(file: string): boolean {
    const identity = identityOf(file);
    return identity !== undefined && this.cache.has(identity);
  }

  private ofFile(file: string): Promise<readonly string[]> {
    const identity = identityOf(file);
    if (identity === undefined) return Promise.resolve([]);
    let found = this.cache.get(identity);
    if (!found) {
      found = this.read(file);
      this.cache.set(identity, found);
      // A failure is not remembered: the next spawn asks again.
      found.catch(() => this.cache.delete(identity));
    }
    return found;
  }

  private async read(file: string): Promise<readonly string[]> {
    const head = readHead(file);
    if (head.startsWith(ELF_MAGIC)) return this.libraries([file]);
    if (head.startsWith('#!')) {
      return this.of(shebangInterpreters(head));
    }
    return [];
  }

  /**
   * The shared libraries and loaders that any of `files` (ELF files, e.g. the extension modules of an
   * interpreter) needs, from one ldd run instead of one per file. Not cached: for what a runtime
   * reads once.
   */
  async librariesOfAll(files: readonly string[]): Promise<string[]> {
    const found = new Set<string>();
    for (let start = 0; start < files.length; start += LDD_BATCH) {
      for (const path of await this.libraries(files.slice(start, start + LDD_BATCH))) found.add(path);
    }
    return [...found];
  }

  private async libraries(files: readonly string[]): Promise<readonly string[]> {
    let stdout: string;
    try {
      ({ stdout } = await run(this.ldd, [...files], {
        // Nothing of the runtime's environment (LD_LIBRARY_PATH, LD_PRELOAD) may change the answer.
        env: { PATH: DEFAULT_PATH, LC_ALL: 'C' },
        encoding: 'utf8',
        maxBuffer: 16 * 1024 * 1024,
      }));
    } catch (error) {
      // A static executable or a library ldd cannot read: nothing to add for it (exit status 1).
      const { code, stdout: partial } = error as { code?: unknown; stdout?: string };
      if (code === 1) stdout = partial ?? '';
      else
        throw new SigilError(
          'unavailable',
          `cannot list the shared libraries of ${files.join(', ')}: ${(error as Error).message}`,
          { details: { reason: 'ldd_failed', path: files[0] }, cause: error },
        );
    }
    return stdout.split('\n').flatMap((line) => LDD_PATH.exec(line)?.[1] ?? []);
  }
}

/** A file's path and which file it is now (replaced or changed, it is another); undefined if not a file. */
function identityOf(file: string): string | undefined {
  try {
    const stat = statSync(file);
    return stat.isFile() ? `${file}\0${stat.dev}:${stat.ino}:${stat.mtimeMs}` : undefined;
  } catch {
    return undefined;
  }
}

function readHead(file: string): string {
  const buffer = Buffer.alloc(SHEBANG_BYTES);
  const fd = openSync(file, 'r');
  try {
    return buffer.toString('latin1', 0, readSync(fd, buffer, 0, SHEBANG_BYTES, 0));
  } finally {
    closeSync(fd);
  }
}

/** What a `#!` line runs: its interpreter, and for `#!/usr/bin/env name`, `name` on the sandbox's PATH too. */
function shebangInterpreters(head: string): string[] {
  const [interpreter, argument] = (head.slice(2).split('\n')[0] ?? '').trim().split(/\s+/);
  if (!interpreter || !isAbsolute(interpreter)) return [];
  if (basename(interpreter) !== 'env' || !argument || argument.startsWith('-')) return [interpreter];
  const program = DEFAULT_PATH.split(':')
    .map((dir) => join(dir, argument))
    .find((path) => {
      try {
        return statSync(path).isFile();
      } catch {
        return false;
      }
    });
  return program ? [interpreter, program] : [interpreter];
}
