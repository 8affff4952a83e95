import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import yazl from 'yazl';

/**
 * Wheels (PEP 427) made by the tests, offline and without pip: a wheel is a zip archive holding the
 * package's files and a `.dist-info` directory (METADATA, WHEEL, entry_points.txt and a RECORD with
 * every file's sha256). `wheelFromProject` reads a fixture's pyproject.toml (with python3's tomllib)
 * so that the fixture's own definition is what gets packaged, as `pip wheel` would package it.
 */

export interface WheelSpec {
  name: string;
  version: string;
  /** `py3-none-any` unless given. */
  tag?: string;
  /** Archive path → content. */
  files: Record<string, string | Buffer>;
  requires?: string[];
  requiresPython?: string;
  /** Extra name → its requirements. */
  extras?: Record<string, string[]>;
  /** Console scripts: name → `module:function`. */
  consoleScripts?: Record<string, string>;
  /** Writes these RECORD hashes instead of the files' own (a wheel whose builder lied). */
  recordOverrides?: Record<string, string>;
}

export interface BuiltWheel {
  filename: string;
  bytes: Buffer;
  /** Lowercase hex, as an index lists it. */
  sha256: string;
}

/** The distribution name as file names spell it (PEP 491: normalised, `_` for runs of `-_.`). */
export const distName = (name: string): string => name.replace(/[-_.]+/g, '_').toLowerCase();

export const sha256Hex = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

/** A fixed time, so that the same files make the same bytes. */
const MTIME = new Date('2026-01-01T00:00:00Z');

export async function buildWheel(spec: WheelSpec): Promise<BuiltWheel> {
  const tag = spec.tag ?? 'py3-none-any';
  const distInfo = `${distName(spec.name)}-${spec.version}.dist-info`;
  const metadata = [
    'Metadata-Version: 2.1',
    `Name: ${spec.name}`,
    `Version: ${spec.version}`,
    ...(spec.requiresPython ? [`Requires-Python: ${spec.requiresPython}`] : []),
    ...(spec.requires ?? []).map((requirement) => `Requires-Dist: ${requirement}`),
    ...Object.entries(spec.extras ?? {}).flatMap(([extra, requirements]) => [
      `Provides-Extra: ${extra}`,
      ...requirements.map((requirement) => `Requires-Dist: ${requirement}; extra == "${extra}"`),
    ]),
  ];
  const files: Record<string, string | Buffer> = {
    ...spec.files,
    [`${distInfo}/METADATA`]: `${metadata.join('\n')}\n\nA package made by Sigil's tests.\n`,
    [`${distInfo}/WHEEL`]: `Wheel-Version: 1.0\nGenerator: sigil-test-support\nRoot-Is-Purelib: ${tag.endsWith('-any')}\nTag: ${tag}\n`,
  };
  const scripts = Object.entries(spec.consoleScripts ?? {});
  if (scripts.length > 0) {
    files[`${distInfo}/entry_points.txt`] =
      `[console_scripts]\n${scripts.map(([name, target]) => `${name} = ${target}`).join('\n')}\n`;
  }
  const record = Object.entries(files).map(([path, content]) => {
    const bytes = Buffer.from(content);
    const hash = spec.recordOverrides?.[path] ?? createHash('sha256').update(bytes).digest('base64url');
    return `${path},sha256=${hash},${bytes.length}`;
  });
  files[`${distInfo}/RECORD`] = `${[...record, `${distInfo}/RECORD,,`].join('\n')}\n`;

  const zip = new yazl.ZipFile();
  for (const [path, content] of Object.entries(files)) {
    zip.addBuffer(Buffer.from(content), path, { mtime: MTIME, mode: 0o644 });
  }
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(chunk as Buffer);
  const bytes = Buffer.concat(chunks);
  return { filename: `${distName(spec.name)}-${spec.version}-${tag}.whl`, bytes, sha256: sha256Hex(bytes) };
}

interface PyProject {
  project: {
    name: string;
    version: string;
    'requires-python'?: string;
    dependencies?: string[];
    'optional-dependencies'?: Record<string, string[]>;
    scripts?: Record<string, string>;
  };
  tool?: { setuptools?: { packages?: string[] } };
}

/**
 * The wheel of a fixture project (a pyproject.toml with `[project]` and `[tool.setuptools] packages`),
 * with its version replaced when `version` is given.
 */
export async function wheelFromProject(
  dir: string,
  overrides: Partial<Pick<WheelSpec, 'version' | 'tag' | 'recordOverrides'>> = {},
): Promise<BuiltWheel> {
  const { project, tool } = JSON.parse(
    execFileSync(
      'python3',
      [
        '-I',
        '-c',
        'import json, sys, tomllib; print(json.dumps(tomllib.load(open(sys.argv[1], "rb"))))',
        join(dir, 'pyproject.toml'),
      ],
      { encoding: 'utf8' },
    ),
  ) as PyProject;
  const files: Record<string, Buffer> = {};
  for (const pkg of tool?.setuptools?.packages ?? []) {
    for (const path of listFiles(join(dir, pkg))) {
      if (path.endsWith('.py')) files[relative(dir, path)] = readFileSync(path);
    }
  }
  return buildWheel({
    name: project.name,
    version: project.version,
    files,
    requires: project.dependencies ?? [],
    ...(project['requires-python'] ? { requiresPython: project['requires-python'] } : {}),
    extras: project['optional-dependencies'] ?? {},
    consoleScripts: project.scripts ?? {},
    ...overrides,
  });
}

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? entry.name === '__pycache__'
        ? []
        : listFiles(join(dir, entry.name))
      : [join(dir, entry.name)],
  );
}

/**
 * The same archive with one member's name replaced by another of the same length, in its local
 * header and in the central directory: how a hostile wheel gets a name (`../x`) no zip writer makes.
 */
export function renameMember(wheel: BuiltWheel, from: string, to: string): BuiltWheel {
  if (from.length !== to.length) throw new RangeError('a renamed member keeps its length');
  const bytes = Buffer.from(wheel.bytes.toString('latin1').split(from).join(to), 'latin1');
  return { filename: wheel.filename, bytes, sha256: sha256Hex(bytes) };
}
