import { existsSync, realpathSync } from 'node:fs';
import { dirname } from 'node:path';
import { SigilError } from '@sigil/plugin-api';
import type { LinuxNamespacesConfig } from './config.ts';
import { Dependencies } from './dependencies.ts';
import { findTools, firstUnsearchable, someSandboxUid } from './host.ts';
import type { Tools } from './launch.ts';
import { describePython, type PythonInterpreter } from './python.ts';
import { syscallFilter, type FilterInterpreter, type SyscallFilter } from './seccomp.ts';

/**
 * What the runtime learns of its host without changing anything on it: the tools, the syscall filter
 * it can install with what that filter's loader needs inside a sandbox, and the Python it runs Python
 * servers with. Read once per runtime (status() may ask before start()).
 */
export interface HostFacts {
  tools: Tools;
  dependencies: Dependencies;
  filter: FilterSetup | { off: string };
  /**
   * Asked at the first python launch or status() (its extension modules' libraries take ldd a while),
   * at start-up only when the config names one; then remembered.
   */
  python: () => Promise<PythonRuntime | { unavailable: string }>;
}

export interface FilterSetup {
  filter: SyscallFilter;
  /** Host files the filter's loader needs inside the sandbox (never the interpreter itself). */
  needs: readonly string[];
  /** Directories inside those that stay hidden (see root.ts). */
  hidden: readonly string[];
}

export interface PythonRuntime {
  interpreter: PythonInterpreter;
  /**
   * Host files a Python server needs besides the interpreter program and its libraries: the standard
   * library and what its extension modules load.
   */
  needs: readonly string[];
}

/** Which interpreter loads the syscall filter: a kind found with the tools, or a file of that kind. */
export type FilterLoaderChoice = FilterInterpreter | { name: FilterInterpreter; path: string };

export interface DetectOptions {
  config: LinuxNamespacesConfig;
  /** The filter's interpreter; perl when present, else python3, unless a test decides. */
  filterInterpreter: FilterLoaderChoice | undefined;
}

export async function detectHost({ config, filterInterpreter }: DetectOptions): Promise<HostFacts> {
  const tools = findTools();
  if (!tools.ldd) {
    throw new SigilError('unavailable', 'the sandbox needs ldd to find the libraries of what it runs', {
      hint: 'install libc-bin (or your C library’s ldd)',
    });
  }
  const dependencies = new Dependencies(tools.ldd);
  // A node server's first spawn needs node's libraries (start-sandbox.ts): looked up now, beside the
  // rest of the start-up, instead of on the first tools/call's path.
  dependencies.prefetch([realpathSync(process.execPath)]);
  const filter = await chooseFilter(config, tools, dependencies, filterInterpreter);
  let python: Promise<PythonRuntime | { unavailable: string }> | undefined;
  return { tools, dependencies, filter, python: () => (python ??= findPython(config, dependencies)) };
}

/**
 * The syscall filter this host allows, or why none: `seccomp` in the config insists (start-up fails
 * without one), `auto` runs without and says why.
 */
async function chooseFilter(
  config: LinuxNamespacesConfig,
  tools: Tools,
  dependencies: Dependencies,
  interpreter: FilterLoaderChoice | undefined,
): Promise<FilterSetup | { off: string }> {
  if (config.syscallFilter === 'off') return { off: 'syscallFilter: off in config' };
  try {
    return await filterSetup(config, tools, dependencies, interpreter);
  } catch (error) {
    if (config.syscallFilter === 'seccomp') throw error;
    return { off: (error as Error).message };
  }
}

async function filterSetup(
  config: LinuxNamespacesConfig,
  tools: Tools,
  dependencies: Dependencies,
  choice: FilterLoaderChoice | undefined,
): Promise<FilterSetup> {
  const name = typeof choice === 'object' ? choice.name : (choice ?? (tools.perl ? 'perl' : 'python3'));
  const path = typeof choice === 'object' ? choice.path : tools[name];
  const hint =
    'install perl-base or python3, or set syscallFilter: off for the sandbox-linux-namespaces plugin';
  if (!path || !existsSync(path)) {
    throw new SigilError(
      'unavailable',
      `the sandbox syscall filter needs ${choice === undefined ? 'perl or python3' : name} on the host (${path ?? 'in /usr/bin or /bin'})`,
      { hint, details: { reason: 'filter_loader_missing' } },
    );
  }
  const filter = syscallFilter({ name, path });
  if (!filter) {
    throw new SigilError(
      'unavailable',
      `the sandbox syscall filter has no syscall table for ${process.arch}`,
      {
        hint,
        details: { reason: 'filter_arch_unknown' },
      },
    );
  }
  // The chain opens the loader as the sandbox's user, while the host's root is still in view.
  const blocked = firstUnsearchable(dirname(path), someSandboxUid(config.uidRange));
  if (blocked) {
    throw new SigilError(
      'unavailable',
      `the sandbox syscall filter's ${path} is not reachable by the sandbox user: ${blocked.dir} is mode ${blocked.mode.toString(8)}`,
      { hint, details: { reason: 'filter_loader_unreachable' } },
    );
  }
  if (name === 'perl') {
    return { filter, needs: (await dependencies.of([path])).filter((file) => file !== path), hidden: [] };
  }
  // python3 imports ctypes from its standard library, and _ctypes loads libffi.
  const python = await describePython(path);
  const ctypes = python.extensionModules.filter((file) => /\/_ctypes[.]/.test(file));
  const needs = [
    ...python.libraryPaths,
    ...(await dependencies.librariesOfAll([python.executable, ...ctypes])),
  ].filter((file) => file !== python.executable);
  return { filter, needs, hidden: python.hidden };
}

/** The Python that runs `python` launches: the configured one (which must work), else python3 on PATH. */
async function findPython(
  config: LinuxNamespacesConfig,
  dependencies: Dependencies,
): Promise<PythonRuntime | { unavailable: string }> {
  let interpreter: PythonInterpreter;
  try {
    interpreter = await describePython(config.python ?? 'python3');
  } catch (error) {
    if (config.python !== undefined) throw error;
    return { unavailable: (error as Error).message };
  }
  const needs = [
    ...interpreter.libraryPaths,
    ...(await dependencies.librariesOfAll(interpreter.extensionModules)),
  ];
  return { interpreter, needs };
}
