import { join } from 'node:path';
import type { EntryPoint, HostLaunch } from './contracts/launch.ts';
import { SigilError } from './errors.ts';

/** An installed Node package: where it is, the directory holding its tree, and its executables. */
export interface InstalledNodePackage {
  name: string;
  version: string;
  /** Directory of the package itself (its package.json), inside `root`. */
  path: string;
  /** Directory holding the package and its dependency tree, mounted read-only by a sandbox. */
  root: string;
  /** Its executables by command name, as absolute paths inside `path`. */
  bin: Readonly<Record<string, string>>;
}

/**
 * How to start an entry point of a Node package with Node: a file inside it (`path`), a named
 * executable (`bin`), or, with neither, its only executable; the entry point's arguments follow.
 * Refuses anything else with `not_found`, naming the executables it has. For every registry whose
 * packages are Node packages (npm, a Git repository with a package.json, v1 registries).
 */
export function nodeLaunch(installed: InstalledNodePackage, entryPoint: EntryPoint): HostLaunch {
  const bins = Object.keys(installed.bin);
  let file: string | undefined;
  if (entryPoint.path !== undefined) file = join(installed.path, entryPoint.path);
  else if (entryPoint.module === undefined) {
    const name = entryPoint.bin ?? (bins.length === 1 ? bins[0] : undefined);
    file = name === undefined ? undefined : installed.bin[name];
  }
  if (file === undefined) {
    const wanted =
      entryPoint.module !== undefined
        ? `no Python module "${entryPoint.module}": it is a Node package`
        : entryPoint.bin === undefined
          ? 'more than one executable or none (name one in entry.bin)'
          : `no executable "${entryPoint.bin}"`;
    throw new SigilError('not_found', `Package ${installed.name}@${installed.version} has ${wanted}`, {
      hint: `It provides: ${bins.join(', ') || 'none'}`,
      details: { reason: 'not_found' },
    });
  }
  return { kind: 'host', runtime: 'node', root: installed.root, args: [file, ...entryPoint.args] };
}
