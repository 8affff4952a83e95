import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { dirname, resolve as resolvePath, sep } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as pep440 from '@renovatebot/pep440';
import yauzl, { type Entry, type ZipFile } from 'yauzl';
import { PypiRegistryError } from './errors.ts';
import { normalizeName } from './requirements.ts';

/**
 * Installs a wheel (PEP 427) the way an installer does, without pip: the archive is unpacked into
 * the scheme's directories (`.data/purelib|platlib` and the archive root to site-packages,
 * `.data/scripts` to bin), every file checked against the wheel's RECORD. The wheel itself was
 * verified against the index's sha256 before it got here; the RECORD check catches a wheel whose
 * builder wrote something other than it listed. Nothing in a wheel runs at install: there is no
 * install hook in the format.
 */

/** Where the parts of a wheel go: the `sysconfig` scheme of one private prefix. */
export interface Scheme {
  site: string;
  scripts: string;
  data: string;
  headers: string;
}

export interface WheelContents {
  /** The project name as METADATA spells it. */
  name: string;
  version: string;
  requiresDist: string[];
  requiresPython: string | undefined;
  /** `[console_scripts]` of entry_points.txt: script name → `module:attribute`. */
  consoleScripts: Record<string, string>;
  /** Files of `.data/scripts`, by name. */
  scripts: string[];
  /** Bytes unpacked. */
  bytes: number;
}

const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;

/** Unpacks `wheelPath` into `scheme`; refuses (invalid_metadata) anything that is not a sound wheel of `name`. */
export async function installWheel(
  wheelPath: string,
  scheme: Scheme,
  expected: { name: string; version: string; packageId: string },
  maxBytes: number,
): Promise<WheelContents> {
  const refuse = (message: string): PypiRegistryError =>
    new PypiRegistryError('invalid_metadata', `${expected.packageId}: ${message}`, {
      package: expected.packageId,
    });
  let zip: ZipFile;
  try {
    // strictFileNames: a `\` in a name is an error, not a separator; yauzl also refuses absolute and `..` names.
    zip = await yauzl.openPromise(wheelPath, {
      lazyEntries: true,
      // Entries are read after the listing ends, which would otherwise close the file.
      autoClose: false,
      strictFileNames: true,
      validateEntrySizes: true,
    });
  } catch (err) {
    throw refuse(`the wheel is not a readable zip archive (${(err as Error).message})`);
  }
  try {
    const entries = await readEntries(zip).catch((err: Error) => {
      throw refuse(`the wheel's archive is unsound (${err.message})`);
    });
    const distInfo = distInfoDir(entries, refuse);
    const text = async (name: string): Promise<string | undefined> => {
      const entry = entries.find((candidate) => candidate.fileName === `${distInfo}/${name}`);
      return entry ? (await readAll(zip, entry)).toString('utf8') : undefined;
    };
    const wheelFile = await text('WHEEL');
    const wheelVersion = wheelFile && headers(wheelFile).get('wheel-version')?.[0];
    if (!wheelVersion?.startsWith('1.'))
      throw refuse(`unsupported Wheel-Version ${wheelVersion ?? '(none)'}`);
    const metadata = headers((await text('METADATA')) ?? '');
    const name = metadata.get('name')?.[0] ?? '';
    const version = metadata.get('version')?.[0] ?? '';
    if (
      normalizeName(name) !== normalizeName(expected.name) ||
      !pep440.valid(version) ||
      !pep440.eq(version, expected.version)
    ) {
      throw refuse(`the wheel's METADATA names ${name || '(no name)'} ${version || '(no version)'}`);
    }
    const record = parseRecord((await text('RECORD')) ?? '', refuse);
    const dataDir = `${distInfo.slice(0, -'.dist-info'.length)}.data`;
    let bytes = 0;
    const scripts: string[] = [];
    for (const entry of entries) {
      if (entry.fileName.endsWith('/')) continue;
      if (((entry.externalFileAttributes >>> 16) & S_IFMT) === S_IFLNK) {
        throw refuse(`${entry.fileName} is a symbolic link, which a wheel may not hold`);
      }
      const target = destination(entry.fileName, dataDir, scheme, refuse);
      if (target.startsWith(scheme.scripts + sep)) scripts.push(target.slice(scheme.scripts.length + 1));
      bytes += entry.uncompressedSize;
      if (bytes > maxBytes) throw refuse(`the wheel unpacks to more than ${maxBytes} bytes`);
      const listed = record.get(entry.fileName);
      const unlisted =
        /\/RECORD(\.jws|\.p7s)?$/.test(entry.fileName) && entry.fileName.startsWith(`${distInfo}/`);
      if (!listed && !unlisted) throw refuse(`${entry.fileName} is not listed in the wheel's RECORD`);
      const digest = await extract(zip, entry, target);
      if (listed?.sha256 && listed.sha256 !== digest) {
        throw refuse(`${entry.fileName} does not match its hash in the wheel's RECORD`);
      }
    }
    return {
      name,
      version,
      requiresDist: metadata.get('requires-dist') ?? [],
      requiresPython: metadata.get('requires-python')?.[0],
      consoleScripts: consoleScripts((await text('entry_points.txt')) ?? ''),
      scripts: scripts.sort(),
      bytes,
    };
  } finally {
    zip.close();
  }
}

function readEntries(zip: ZipFile): Promise<Entry[]> {
  return new Promise((resolve, reject) => {
    const entries: Entry[] = [];
    zip.on('entry', (entry: Entry) => {
      entries.push(entry);
      zip.readEntry();
    });
    zip.once('end', () => resolve(entries));
    zip.once('error', reject);
    zip.readEntry();
  });
}

async function readAll(zip: ZipFile, entry: Entry): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await zip.openReadStreamPromise(entry)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Writes one entry (never over an existing file) and answers its sha256 in RECORD's encoding. */
async function extract(zip: ZipFile, entry: Entry, target: string): Promise<string> {
  await mkdir(dirname(target), { recursive: true });
  const hash = createHash('sha256');
  const tee = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
  const mode = (entry.externalFileAttributes >>> 16) & 0o111 ? 0o755 : 0o644;
  await pipeline(
    await zip.openReadStreamPromise(entry),
    tee,
    createWriteStream(target, { flags: 'wx', mode }),
  );
  return hash.digest('base64url');
}

/** The one top-level `<name>-<version>.dist-info` directory. */
function distInfoDir(entries: readonly Entry[], refuse: (message: string) => Error): string {
  const dirs = new Set(
    entries.map((entry) => entry.fileName.split('/')[0] ?? '').filter((top) => top.endsWith('.dist-info')),
  );
  const [dir, ...others] = dirs;
  if (!dir || others.length > 0)
    throw refuse(`a wheel has one .dist-info directory, this one has ${dirs.size}`);
  return dir;
}

/**
 * Where an archive member goes. yauzl already refuses absolute names and `..`; this checks again
 * against the resolved path, because a member written outside the entry would outlive its removal.
 */
function destination(
  name: string,
  dataDir: string,
  scheme: Scheme,
  refuse: (message: string) => Error,
): string {
  const parts = name.split('/');
  if (parts.some((part) => part === '' || part === '.' || part === '..' || part.includes('\0'))) {
    throw refuse(`${JSON.stringify(name)} is not a safe path inside the wheel`);
  }
  let base = scheme.site;
  let rest = parts;
  if (parts[0] === dataDir) {
    const key = parts[1] ?? '';
    const bases: Record<string, string> = {
      purelib: scheme.site,
      platlib: scheme.site,
      scripts: scheme.scripts,
      data: scheme.data,
      headers: scheme.headers,
    };
    if (!(key in bases) || parts.length < 3)
      throw refuse(`${name} is in no directory a wheel's .data may name`);
    base = bases[key] ?? scheme.site;
    rest = parts.slice(2);
  }
  const target = resolvePath(base, ...rest);
  if (!target.startsWith(base + sep)) throw refuse(`${JSON.stringify(name)} leaves the install directory`);
  return target;
}

/** RFC 822-style headers (METADATA, WHEEL), lowercased names, each with all its values. */
function headers(text: string): Map<string, string[]> {
  const fields = new Map<string, string[]>();
  let last: string[] | undefined;
  for (const line of text.split(/\r?\n/)) {
    if (line === '') break; // the body (a long description) follows
    if (/^[ \t]/.test(line) && last) {
      last[last.length - 1] += `\n${line.trim()}`;
      continue;
    }
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const key = line.slice(0, colon).trim().toLowerCase();
    last = fields.get(key) ?? [];
    last.push(line.slice(colon + 1).trim());
    fields.set(key, last);
  }
  return fields;
}

/** RECORD: CSV rows `path,sha256=<urlsafe base64, unpadded>,size` (PEP 376, PEP 427). */
function parseRecord(text: string, refuse: (message: string) => Error): Map<string, { sha256?: string }> {
  const rows = new Map<string, { sha256?: string }>();
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === '') continue;
    const [path, hash = ''] = csvFields(line);
    if (!path) continue;
    const [algorithm, value] = hash.split('=', 2);
    if (hash !== '' && algorithm !== 'sha256' && !['sha384', 'sha512'].includes(algorithm ?? '')) {
      throw refuse(`RECORD lists ${path} with a ${algorithm} hash, which is too weak`);
    }
    rows.set(path, algorithm === 'sha256' && value ? { sha256: value.replace(/=+$/, '') } : {});
  }
  return rows;
}

/** One CSV line as Python's csv module writes it (quotes around fields holding `,` or `"`). */
function csvFields(line: string): string[] {
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < line.length; i += 1) {
    const char = line[i];
    if (quoted) {
      if (char === '"' && line[i + 1] === '"') {
        field += '"';
        i += 1;
      } else if (char === '"') quoted = false;
      else field += char;
    } else if (char === '"') quoted = true;
    else if (char === ',') {
      fields.push(field);
      field = '';
    } else field += char;
  }
  fields.push(field);
  return fields;
}

/** `[console_scripts]` of entry_points.txt (an INI file): name → `module:attribute`, extras dropped. */
function consoleScripts(text: string): Record<string, string> {
  const scripts: Record<string, string> = {};
  let section = '';
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = header[1]?.trim() ?? '';
      continue;
    }
    const equals = line.indexOf('=');
    if (section !== 'console_scripts' || equals <= 0) continue;
    scripts[line.slice(0, equals).trim()] = line
      .slice(equals + 1)
      .replace(/\[.*\]\s*$/, '')
      .trim();
  }
  return scripts;
}
