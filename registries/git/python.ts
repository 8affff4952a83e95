import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EntryPoint, HostLaunch } from '@sigil/plugin-api';
import { GitRegistryError } from './errors.ts';
import { fileInside, noSuchEntryPoint } from './entry-points.ts';
import { run, tail, type RunResult } from './run.ts';

/**
 * A repository with a pyproject.toml, built into a wheel by the host's Python with no network and no
 * build isolation (the backend must be installed on the host), then installed by pip into a site
 * directory of the entry, and started with `python`, its code found through PYTHONPATH.
 */

export interface PythonBuildOptions {
  /** The Python that builds (and should be the one the sandbox runs). */
  python: string;
  timeoutMs: number;
}

export interface PythonBuild {
  wheel: string;
  backend: string;
  /** The repository's own build code that ran: `setup.py`, or an in-tree backend. */
  installScripts: string[];
}

interface Check {
  python: string;
  pip: string | null;
  backend: string;
  requires: string[];
  inTreeBackend: boolean;
  setupPy: boolean;
  missing: string[];
}

const HELPER = fileURLToPath(new URL('./python_build.py', import.meta.url));

/** The site directory, and where pip put the scripts, inside an entry. */
export const SITE = 'site';

/**
 * Builds and installs the project at `src` into `<entry>/site`. `-I` and `--isolated` keep the
 * operator's PYTHON* and PIP_* settings and user site out; `--no-index` keeps pip off the network.
 */
export async function buildPython(
  src: string,
  entry: string,
  work: string,
  packageId: string,
  options: PythonBuildOptions,
): Promise<PythonBuild> {
  const home = join(work, 'home');
  const wheels = join(work, 'wheels');
  await Promise.all([mkdir(home, { recursive: true }), mkdir(wheels, { recursive: true })]);
  const python = (args: string[], describe: string) =>
    run(options.python, ['-I', ...args], {
      cwd: src,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, TMPDIR: home, LC_ALL: 'C.UTF-8' },
      timeoutMs: options.timeoutMs,
    }).then(
      (result) => {
        if (result.code !== 0) throw pythonFailure(result, `${packageId}: ${describe} failed`);
        return result.stdout;
      },
      (err: unknown) => {
        throw new GitRegistryError(
          'install_failed',
          `${packageId}: cannot run ${options.python}: ${String(err)}`,
          {
            hint: 'registry-git builds Python projects with the host Python named in its option python',
          },
        );
      },
    );
  const check = JSON.parse(await python([HELPER, 'check', src], 'reading pyproject.toml')) as Check;
  if (check.missing.length > 0) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: cannot build its wheel with ${options.python} (Python ${check.python}): missing ${check.missing.join(', ')}`,
      {
        hint: `Install what is missing for that Python (on Debian: python3-pip, python3-setuptools, python3-wheel), or name another in the option python`,
        details: { backend: check.backend, missing: check.missing },
      },
    );
  }
  const pip = ['-m', 'pip', '--isolated', '--disable-pip-version-check', '--no-input', '--no-cache-dir'];
  await python(
    [...pip, 'wheel', '--no-deps', '--no-build-isolation', '--no-index', '--wheel-dir', wheels, src],
    `building the wheel (backend ${check.backend})`,
  );
  const built = (await readdir(wheels)).filter((name) => name.endsWith('.whl'));
  if (built.length !== 1) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: the build made ${built.length} wheels, not one`,
    );
  }
  const wheel = join(wheels, built[0] as string);
  const metadata = JSON.parse(await python([HELPER, 'requires', wheel], 'reading the wheel')) as {
    requires: string[];
  };
  if (metadata.requires.length > 0) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId} depends on ${metadata.requires.join(', ')}: registry-git does not install Python dependencies yet`,
      {
        hint: 'Serve the server from the PyPI registry instead, or vendor its dependencies',
        details: { requires: metadata.requires },
      },
    );
  }
  await python(
    [
      ...pip,
      'install',
      '--no-deps',
      '--no-index',
      '--no-compile',
      '--no-warn-script-location',
      '--target',
      join(entry, SITE),
      wheel,
    ],
    'installing the wheel',
  );
  return {
    wheel: built[0] as string,
    backend: check.backend,
    installScripts: [...(check.setupPy ? ['setup.py'] : []), ...(check.inTreeBackend ? [check.backend] : [])],
  };
}

function pythonFailure(result: RunResult, message: string): GitRegistryError {
  return new GitRegistryError(
    'install_failed',
    result.timedOut ? `${message}: it did not finish in time` : message,
    {
      details: { python: tail(result.stderr || result.stdout, 10) },
    },
  );
}

/**
 * How to start `entryPoint`: `module` with `python -m`, `bin` a script pip installed (a console
 * script's wrapper, or one of the wheel's scripts), `path` a file of the checkout; neither takes the
 * only script.
 */
export async function pythonLaunch(
  root: string,
  src: string,
  entryPoint: EntryPoint,
  packageId: string,
): Promise<HostLaunch> {
  const site = join(root, SITE);
  const env = { PYTHONPATH: site, PYTHONDONTWRITEBYTECODE: '1', PYTHONNOUSERSITE: '1' };
  const launch = (args: string[]): HostLaunch => ({
    kind: 'host',
    runtime: 'python',
    root,
    args: [...args, ...entryPoint.args],
    env,
  });
  if (entryPoint.module !== undefined) {
    const modules = await topLevelModules(site);
    const top = entryPoint.module.split('.')[0] ?? '';
    if (!/^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$/.test(entryPoint.module) || !modules.includes(top)) {
      throw noSuchEntryPoint(packageId, entryPoint, modules, 'its installed modules');
    }
    return launch(['-m', entryPoint.module]);
  }
  if (entryPoint.path !== undefined) return launch([await fileInside(src, entryPoint.path, packageId)]);
  const scripts = (await readdir(join(site, 'bin')).catch(() => [] as string[])).sort();
  const name = entryPoint.bin ?? (scripts.length === 1 ? scripts[0] : undefined);
  if (name === undefined || !scripts.includes(name)) {
    throw noSuchEntryPoint(packageId, entryPoint, scripts, 'its console scripts');
  }
  return launch([join(site, 'bin', name)]);
}

/** Importable top-level names of a site directory: packages and modules. */
async function topLevelModules(site: string): Promise<string[]> {
  const names = await readdir(site, { withFileTypes: true }).catch(() => []);
  return names
    .filter((entry) =>
      entry.isDirectory()
        ? /^[A-Za-z_]\w*$/.test(entry.name) && entry.name !== 'bin' && entry.name !== '__pycache__'
        : /^[A-Za-z_]\w*\.py$/.test(entry.name),
    )
    .map((entry) => entry.name.replace(/\.py$/, ''))
    .sort();
}
