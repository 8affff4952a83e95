import { existsSync } from 'node:fs';
import { join, resolve as resolvePath, sep } from 'node:path';
import { type EntryPoint, type HostLaunch, SigilError } from '@sigil/plugin-api';
import type { EntryRecord } from './cache.ts';
import { PypiRegistryError } from './errors.ts';

const MODULE = /^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$/;

/**
 * How to start `entryPoint` of an installed entry with the sandbox's `python3`: a console script by
 * its launcher (`bin`), a module with `-m` (`module`), a file of site-packages (`path`), or, with none
 * named, the package's only console script. The environment points Python at the entry's
 * site-packages and keeps it from writing bytecode or reading a user site (the root is read-only and
 * nothing outside it belongs to the server).
 */
export function launchFor(root: string, record: EntryRecord, entryPoint: EntryPoint): HostLaunch {
  const packageId = `${record.name}==${record.version}`;
  const named = (['bin', 'module', 'path'] as const).filter((key) => entryPoint[key] !== undefined);
  if (named.length > 1) {
    throw new SigilError(
      'invalid_request',
      `an entry point names at most one of bin, module, path; got ${named.join(', ')}`,
    );
  }
  const site = join(root, 'site');
  const scripts = Object.keys(record.consoleScripts);
  const notFound = (what: string) =>
    new PypiRegistryError('not_found', `${packageId} has no ${what}`, {
      package: packageId,
      hint:
        scripts.length > 0
          ? `Its console scripts: ${scripts.join(', ')}`
          : 'It declares no console script; name a module to run with -m instead',
      details: { consoleScripts: scripts },
    });
  let program: string[];
  if (entryPoint.bin !== undefined) {
    const bin = entryPoint.bin;
    if (!(bin in record.consoleScripts) && !record.scripts.includes(bin))
      throw notFound(`console script "${bin}"`);
    program = [join(root, 'bin', bin)];
  } else if (entryPoint.module !== undefined) {
    const module = entryPoint.module;
    const path = join(site, ...module.split('.'));
    if (!MODULE.test(module) || !(existsSync(`${path}.py`) || existsSync(join(path, '__main__.py')))) {
      throw notFound(`module "${module}" to run with -m`);
    }
    program = ['-m', module];
  } else if (entryPoint.path !== undefined) {
    const path = resolvePath(site, entryPoint.path);
    if (!path.startsWith(site + sep) || !existsSync(path))
      throw notFound(`file "${entryPoint.path}" in its site-packages`);
    program = [path];
  } else {
    const [only, ...others] = record.ownScripts;
    if (!only || others.length > 0) {
      throw notFound(
        only ? 'single console script to start by default: name one' : 'console script to start by default',
      );
    }
    program = [join(root, 'bin', only)];
  }
  return {
    kind: 'host',
    runtime: 'python',
    root,
    args: [...program, ...entryPoint.args],
    env: { PYTHONPATH: site, PYTHONDONTWRITEBYTECODE: '1', PYTHONNOUSERSITE: '1' },
  };
}
