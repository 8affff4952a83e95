import { execFile } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as pep440 from '@renovatebot/pep440';
import type { PluginLogger, ResolvedPackage } from '@sigil/plugin-api';
import type { InstalledDistribution } from './cache.ts';
import { choose, type Distribution, pinned } from './distributions.ts';
import { PypiRegistryError } from './errors.ts';
import type { PythonHost } from './python.ts';
import { evaluateMarker, normalizeName, parseRequirement, type Requirement } from './requirements.ts';
import type { SimpleIndex } from './simple-api.ts';
import { installWheel, type Scheme, type WheelContents } from './wheel.ts';

/** What an install put into its directory, for the entry's record. */
export interface InstalledTree {
  distributions: InstalledDistribution[];
  consoleScripts: Record<string, string>;
  ownScripts: string[];
  scripts: string[];
}

export interface InstallerOptions {
  index: SimpleIndex;
  python: string;
  maxUnpackedBytes: number;
  logger: PluginLogger;
}

interface Installed {
  version: string;
  contents: WheelContents;
  /** Extras whose requirements were followed. */
  extras: Set<string>;
}

/** A dependency to install, and who asked for it (for messages). */
interface Wanted extends Requirement {
  requiredBy: string;
}

const run = promisify(execFile);

/**
 * Installs a pinned wheel and its `Requires-Dist` into one directory, every wheel downloaded from
 * the configured index and checked against its sha256 before it is opened. Dependencies are chosen
 * greedily, breadth first: each name gets the newest version that satisfies the first requirement
 * naming it, and a later requirement it does not satisfy fails the install (`install_failed`) rather
 * than backtracking. Markers are evaluated for the host's Python.
 */
export class Installer {
  constructor(private readonly options: InstallerOptions) {}

  async install(dir: string, resolved: ResolvedPackage, host: PythonHost): Promise<InstalledTree> {
    const scheme: Scheme = {
      site: join(dir, 'site'),
      scripts: join(dir, 'bin'),
      data: join(dir, 'data'),
      headers: join(dir, 'include'),
    };
    const downloads = join(dir, '.downloads');
    await Promise.all(
      [scheme.site, scheme.scripts, downloads].map((path) => mkdir(path, { recursive: true })),
    );
    const packageId = `${resolved.name}==${resolved.version}`;
    const root = normalizeName(resolved.name);
    const installed = new Map<string, Installed>();
    const distributions: InstalledDistribution[] = [];

    const unpack = async (
      name: string,
      file: Distribution,
      sha256: string,
      id: string,
    ): Promise<WheelContents> => {
      const path = join(downloads, file.filename.replace(/[^A-Za-z0-9._+!-]/g, '_'));
      await this.options.index.download(file, sha256, path, id);
      const contents = await installWheel(
        path,
        scheme,
        { name, version: file.version, packageId: id },
        this.options.maxUnpackedBytes,
      );
      await rm(path);
      distributions.push({
        name: normalizeName(contents.name),
        version: file.version,
        digest: `sha256:${sha256}`,
        wheel: file.filename,
      });
      return contents;
    };

    const page = await this.options.index.project(root);
    const sha256 = resolved.digest.slice('sha256:'.length);
    const rootContents = await unpack(
      root,
      pinned(page, resolved.version, sha256, packageId),
      sha256,
      packageId,
    );
    if (rootContents.requiresPython && !pep440.satisfies(host.version, rootContents.requiresPython)) {
      throw new PypiRegistryError(
        'install_failed',
        `${packageId} requires Python ${rootContents.requiresPython}; the host's is ${host.version}`,
        { package: packageId },
      );
    }
    installed.set(root, { version: resolved.version, contents: rootContents, extras: new Set() });

    const queue: Wanted[] = this.requirements(rootContents, packageId, [], host);
    for (let wanted = queue.shift(); wanted; wanted = queue.shift()) {
      const name = normalizeName(wanted.name);
      const have = installed.get(name);
      if (have) {
        if (wanted.specifier !== '' && !pep440.satisfies(have.version, wanted.specifier)) {
          throw new PypiRegistryError(
            'install_failed',
            `${packageId}: ${wanted.requiredBy} requires ${name}${wanted.specifier}, but ${name} ${have.version} was already chosen for another requirement`,
            { package: packageId, hint: 'The dependencies conflict; pin versions that agree' },
          );
        }
        const extras = wanted.extras.filter((extra) => !have.extras.has(extra));
        extras.forEach((extra) => have.extras.add(extra));
        if (extras.length > 0)
          queue.push(...this.requirements(have.contents, `${name}==${have.version}`, extras, host, true));
        continue;
      }
      const { version, contents } = await this.dependency(name, wanted, host, unpack).catch(
        (err: unknown) => {
          throw inDependency(err, packageId, wanted.requiredBy);
        },
      );
      installed.set(name, { version, contents, extras: new Set(wanted.extras) });
      queue.push(...this.requirements(contents, `${name}==${version}`, wanted.extras, host));
    }

    await rm(downloads, { recursive: true });
    const tree = await this.writeLaunchers(
      scheme.scripts,
      rootContents,
      [...installed.values()].map((i) => i.contents),
    );
    await this.compile(scheme.site, packageId);
    return { distributions, ...tree };
  }

  /** Chooses, downloads, verifies and unpacks the newest version of `name` that `wanted` allows. */
  private async dependency(
    name: string,
    wanted: Wanted,
    host: PythonHost,
    unpack: (name: string, file: Distribution, sha256: string, id: string) => Promise<WheelContents>,
  ): Promise<{ version: string; contents: WheelContents }> {
    const page = await this.options.index.project(name);
    const choice = choose(page, wanted.specifier || 'latest', host, `${name}${wanted.specifier}`);
    const id = `${name}==${choice.version}`;
    return { version: choice.version, contents: await unpack(name, choice.wheel, choice.wheel.sha256, id) };
  }

  /** The `Requires-Dist` of `contents` that apply on this host, for no extra or for `extras`. */
  private requirements(
    contents: WheelContents,
    requiredBy: string,
    extras: readonly string[],
    host: PythonHost,
    onlyExtras = false,
  ): Wanted[] {
    const environments = [...(onlyExtras ? [] : ['']), ...extras].map((extra) => ({
      ...host.markers,
      extra,
    }));
    return contents.requiresDist.flatMap((line) => {
      let requirement: Requirement;
      try {
        requirement = parseRequirement(line);
        const applies = environments.some(
          (env) => !requirement.marker || evaluateMarker(requirement.marker, env),
        );
        return applies ? [{ ...requirement, requiredBy }] : [];
      } catch (err) {
        throw new PypiRegistryError(
          'invalid_metadata',
          `${requiredBy}: cannot install the requirement "${line}": ${(err as Error).message}`,
          { package: requiredBy },
        );
      }
    });
  }

  /**
   * A launcher per console script, as an installer writes them, but run by `python <launcher>`: the
   * sandbox supplies the interpreter, so no shebang names a host path. The package's own scripts win
   * a name clash with a dependency's.
   */
  private async writeLaunchers(
    bin: string,
    own: WheelContents,
    all: readonly WheelContents[],
  ): Promise<Omit<InstalledTree, 'distributions'>> {
    const consoleScripts: Record<string, string> = {};
    for (const contents of [own, ...all.filter((c) => c !== own)]) {
      for (const [name, target] of Object.entries(contents.consoleScripts)) {
        if (name in consoleScripts) continue;
        const match = /^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*:\s*([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)*)$/.exec(
          target,
        );
        if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name) || !match) {
          this.options.logger.warn(
            { package: contents.name, script: name, target },
            'skipping a console script that is not module:function',
          );
          continue;
        }
        const [, module, head, rest] = match;
        consoleScripts[name] = `${module}:${head}${rest}`;
        await writeFile(
          join(bin, name),
          `import sys\nfrom ${module} import ${head}\nsys.argv[0] = ${JSON.stringify(name)}\nsys.exit(${head}${rest}())\n`,
          { flag: 'wx' },
        );
      }
    }
    const scripts = [...new Set(all.flatMap((contents) => contents.scripts))].sort();
    return {
      consoleScripts,
      ownScripts: Object.keys(own.consoleScripts).filter((name) => name in consoleScripts),
      scripts,
    };
  }

  /**
   * Byte-compiles the installed modules, as pip does, so that a server in a read-only sandbox does
   * not compile them on every start. No code of the package runs; a file that does not compile (a
   * Python 2 leftover) is left to fail if it is ever imported. One process, not a pool (`-j`): for the
   * small trees MCP servers have, starting the workers costs more than they save (0.17 s against
   * 0.05–0.09 s for this plugin's test server, measured here).
   */
  private async compile(site: string, packageId: string): Promise<void> {
    try {
      await run(this.options.python, ['-I', '-m', 'compileall', '-q', site], {
        timeout: 300_000,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      });
    } catch (err) {
      this.options.logger.warn(
        { package: packageId, err: (err as Error).message.split('\n')[0] },
        'some installed modules did not byte-compile',
      );
    }
  }
}

/**
 * A dependency's failure, told as the installed package's: the message names both, `details.package`
 * stays the dependency (what failed), `details.requiredBy` says who wanted it.
 */
function inDependency(err: unknown, packageId: string, requiredBy: string): unknown {
  if (!(err instanceof PypiRegistryError)) return err;
  return new PypiRegistryError(err.reason, `${packageId}: a dependency failed: ${err.message}`, {
    details: { ...err.details, requiredBy },
    ...(err.hint === undefined ? {} : { hint: err.hint }),
    cause: err,
  });
}
