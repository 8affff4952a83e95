import { execFile } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SigilError } from '@sigil/plugin-api';

/**
 * The host's Python as a sandbox runs it. `python3` on PATH may be a launcher (a pyenv shim is a bash
 * script) or a virtual environment's link, neither of which works alone in a root that holds only
 * chosen files, so the interpreter is asked once who it really is: the program it runs as, and the
 * paths its standard library loads from when no site is imported. A sandbox gets those, and the
 * shared libraries of the program and of its extension modules; not the host's installed packages.
 */
export interface PythonInterpreter {
  /** The interpreter program itself (a real file: not a shim, not a venv's link). */
  executable: string;
  version: string;
  /** `sys.path` without site: its standard library (directories, a zip), each mounted whole. */
  libraryPaths: string[];
  /**
   * Site-packages directories inside `libraryPaths` (pyenv keeps them there): each covered by an
   * empty directory, since the host's installed packages are not the server's.
   */
  hidden: string[];
  /** Extension modules of the standard library (lib-dynload): their shared libraries are mounted too. */
  extensionModules: string[];
}

const run = promisify(execFile);

/**
 * Run with -I -S: no site, no PYTHON* variables, no user or working directory on the path. The base
 * executable is the interpreter of a venv's link; realpath follows pyenv's python3 -> python3.11.
 */
const DESCRIBE = `
import json, os, sys, sysconfig
executable = getattr(sys, '_base_executable', '') or sys.executable
base = {'base': sys.base_prefix, 'platbase': sys.base_exec_prefix}
print(json.dumps({
    'executable': os.path.realpath(executable) if executable else '',
    'version': '%d.%d.%d' % sys.version_info[:3],
    'path': sys.path,
    'sites': [sysconfig.get_path(name, vars=base) for name in ('purelib', 'platlib')],
    'dynload': sysconfig.get_config_var('DESTSHARED') or '',
}))
`;

/** Asks `command` (a path, or a name on this process's PATH) what it runs as; see {@link PythonInterpreter}. */
export async function describePython(command: string): Promise<PythonInterpreter> {
  let answer: {
    executable: string;
    version: string;
    path: string[];
    sites: (string | null)[];
    dynload: string;
  };
  try {
    // This process's environment: a launcher such as pyenv's reads its own variables to pick the version.
    const { stdout } = await run(command, ['-I', '-S', '-c', DESCRIBE], {
      encoding: 'utf8',
      timeout: 30_000,
      maxBuffer: 1024 * 1024,
    });
    answer = JSON.parse(stdout) as typeof answer;
  } catch (error) {
    throw unavailable(command, (error as Error).message.split('\n')[0] ?? 'failed', error);
  }
  if (!answer.executable || !isFile(answer.executable)) {
    throw unavailable(command, `it names no interpreter program (${answer.executable || 'none'})`);
  }
  const libraryPaths = answer.path.filter((path) => path.startsWith('/') && existsSync(path));
  if (libraryPaths.length === 0) throw unavailable(command, 'its standard library is not on this host');
  const inside = (path: string) => libraryPaths.some((library) => path.startsWith(`${library}/`));
  const candidates = [
    ...answer.sites.filter((path): path is string => typeof path === 'string'),
    ...libraryPaths.flatMap((library) =>
      ['site-packages', 'dist-packages'].map((name) => join(library, name)),
    ),
  ];
  const hidden = [...new Set(candidates)].filter((path) => inside(path) && isDirectory(path));
  const extensionModules = isDirectory(answer.dynload)
    ? readdirSync(answer.dynload)
        .filter((name) => name.endsWith('.so'))
        .map((name) => join(answer.dynload, name))
    : [];
  return { executable: answer.executable, version: answer.version, libraryPaths, hidden, extensionModules };
}

function unavailable(command: string, cause: string, error?: unknown): SigilError {
  return new SigilError('unavailable', `cannot use ${command} as the sandbox's python3: ${cause}`, {
    details: { reason: 'python_unavailable', path: command },
    hint: "install python3, or set the sandbox-linux-namespaces plugin's `python` option to its path",
    ...(error === undefined ? {} : { cause: error }),
  });
}

const isFile = (path: string) => {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
};

const isDirectory = (path: string) => {
  try {
    return path !== '' && statSync(path).isDirectory();
  } catch {
    return false;
  }
};
