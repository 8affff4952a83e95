import * as pep440 from '@renovatebot/pep440';
import { SigilError } from '@sigil/plugin-api';
import { PypiRegistryError } from './errors.ts';
import { normalizeName } from './requirements.ts';
import type { IndexFile, ProjectPage } from './simple-api.ts';

/**
 * Which file of a project to install: versions and specifiers by PEP 440, wheels by their tags (PEP
 * 425, as the host's Python supports them), yanked files skipped (PEP 592).
 */

export interface Distribution extends IndexFile {
  kind: 'wheel' | 'sdist';
  /** Normalised PEP 440 version. */
  version: string;
  /** For a wheel: its expanded tags (`py2.py3-none-any` is two). */
  tags: string[];
}

/** What `resolve` and a dependency pick: a version and the wheel of it. */
export interface Choice {
  version: string;
  wheel: Distribution & { sha256: string };
}

const WHEEL = /^([^-]+)-([^-]+)(?:-\d[^-]*)?-([^-]+)-([^-]+)-([^-]+)\.whl$/i;
const SDIST = /^(.+)-([^-]+)\.(?:tar\.gz|zip)$/i;

/** The distribution a file name describes, or undefined for another project's file or another format. */
export function parseFilename(file: IndexFile, project: string): Distribution | undefined {
  const wheel = WHEEL.exec(file.filename);
  const sdist = wheel ? undefined : SDIST.exec(file.filename);
  const [, name, rawVersion] = wheel ?? sdist ?? [];
  const version = rawVersion === undefined ? null : pep440.clean(rawVersion);
  if (!name || !version || normalizeName(name) !== project) return undefined;
  if (!wheel) return { ...file, kind: 'sdist', version, tags: [] };
  const [, , , pythons = '', abis = '', platforms = ''] = wheel;
  const tags = pythons
    .split('.')
    .flatMap((python) =>
      abis.split('.').flatMap((abi) => platforms.split('.').map((p) => `${python}-${abi}-${p}`)),
    );
  return { ...file, kind: 'wheel', version, tags };
}

/** Ranges that mean "the newest release": no pre-releases, as `pip install name` picks. */
const LATEST = new Set(['', '*', 'latest']);

/** Whether `version` satisfies `range` (a specifier set, an exact version, or `latest`). */
export function matcher(range: string, packageId: string): (version: string) => boolean {
  const trimmed = range.trim();
  if (LATEST.has(trimmed)) return (version) => !pep440.explain(version)?.is_prerelease;
  const specifier = pep440.valid(trimmed) ? `==${trimmed}` : trimmed.replace(/\s+/g, '');
  if (!pep440.validRange(specifier)) {
    throw new SigilError(
      'invalid_request',
      `${packageId}: "${range}" is not a PEP 440 version or specifier`,
      {
        hint: 'Use a version (1.2.0), a specifier set (>=1.0,<2, ==1.2.*, ~=1.2) or latest',
      },
    );
  }
  return (version) => pep440.satisfies(version, specifier);
}

export interface Host {
  /** The host Python's full version, for `Requires-Python`. */
  version: string;
  /** Its supported wheel tags, best first. */
  tags: readonly string[];
}

function runsOn(file: IndexFile, host: Host): boolean {
  if (!file.requiresPython) return true;
  // An unreadable Requires-Python is taken as "not this Python", as a cautious installer would.
  return pep440.validRange(file.requiresPython) ? pep440.satisfies(host.version, file.requiresPython) : false;
}

/** The wheel of `files` whose best tag the host ranks highest; undefined when none fits. */
export function bestWheel(files: readonly Distribution[], host: Host): Distribution | undefined {
  const rank = (file: Distribution) =>
    Math.min(...file.tags.map((tag) => host.tags.indexOf(tag)).filter((index) => index >= 0));
  return files
    .filter((file) => file.kind === 'wheel' && runsOn(file, host))
    .map((file) => ({ file, rank: rank(file) }))
    .filter(({ rank }) => Number.isFinite(rank))
    .sort((a, b) => a.rank - b.rank)[0]?.file;
}

/** The project's distributions by normalised version, newest first. */
function byVersion(page: ProjectPage): [string, Distribution[]][] {
  const versions = new Map<string, Distribution[]>();
  for (const file of page.files) {
    const distribution = parseFilename(file, page.name);
    if (distribution)
      versions.set(distribution.version, [...(versions.get(distribution.version) ?? []), distribution]);
  }
  return [...versions].sort(([a], [b]) => pep440.rcompare(a, b));
}

/**
 * The newest version matching `range` that has a wheel for the host (yanked files skipped), and that
 * wheel. `build_required` when the matching versions have only source distributions, `not_found`
 * when nothing matches, `invalid_metadata` when the chosen wheel has no sha256.
 */
export function choose(page: ProjectPage, range: string, host: Host, packageId: string): Choice {
  const matches = matcher(range, packageId);
  const candidates = byVersion(page)
    .filter(([version]) => matches(version))
    .map(([version, files]) => [version, files.filter((file) => file.yanked === false)] as const)
    .filter(([, files]) => files.length > 0);
  for (const [version, files] of candidates) {
    const wheel = bestWheel(files, host);
    if (!wheel) continue;
    if (!wheel.sha256 || !/^[0-9a-f]{64}$/.test(wheel.sha256)) {
      throw new PypiRegistryError(
        'invalid_metadata',
        `${page.name} ${version}: the index gives no sha256 for ${wheel.filename}, so it cannot be verified`,
        { package: `${page.name}==${version}` },
      );
    }
    return { version, wheel: { ...wheel, sha256: wheel.sha256 } };
  }
  const sdist = candidates.find(([, files]) =>
    files.some((file) => file.kind === 'sdist' && runsOn(file, host)),
  );
  if (sdist) {
    throw new PypiRegistryError(
      'build_required',
      `${page.name} ${sdist[0]} is published only as a source distribution, and building from source is off`,
      {
        package: `${page.name}==${sdist[0]}`,
        hint: 'This registry installs wheels only and never runs a build: publish a wheel of it to the index (e.g. `python3 -m pip wheel --no-deps .`)',
      },
    );
  }
  const newest = byVersion(page)
    .slice(0, 5)
    .map(([version]) => version);
  throw new PypiRegistryError(
    'not_found',
    candidates.length > 0
      ? `${packageId}: no wheel of a matching version runs on this host's Python ${host.version}`
      : `${packageId}: no version of ${page.name} on the index matches "${range}"`,
    {
      package: packageId,
      hint: newest.length > 0 ? `Newest versions: ${newest.join(', ')}` : `${page.name} has no files`,
    },
  );
}

/**
 * The file of `version` whose sha256 is `sha256`: what `resolve` chose, even if it was yanked since
 * (PEP 592 keeps exact pins working). `integrity_mismatch` when the index now lists other content
 * for that version, `not_found` when it lists none.
 */
export function pinned(page: ProjectPage, version: string, sha256: string, packageId: string): Distribution {
  const files = byVersion(page).find(([candidate]) => pep440.eq(candidate, version))?.[1] ?? [];
  const file = files.find((candidate) => candidate.sha256 === sha256 && candidate.kind === 'wheel');
  if (file) return file;
  if (files.length === 0) {
    throw new PypiRegistryError('not_found', `${packageId} is no longer on the package index`, {
      package: packageId,
    });
  }
  throw new PypiRegistryError(
    'integrity_mismatch',
    `${packageId}: the index lists no wheel with the pinned digest sha256:${sha256}; its files of that version have changed`,
    { package: packageId, details: { expected: `sha256:${sha256}`, listed: files.map((f) => f.filename) } },
  );
}
