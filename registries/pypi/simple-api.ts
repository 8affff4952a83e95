import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Parser } from 'htmlparser2';
import type { Fetch, PluginLogger } from '@sigil/plugin-api';
import { PypiIntegrityError, PypiRegistryError } from './errors.ts';

/**
 * The Simple Repository API of one index: PEP 691 JSON when the index speaks it, the PEP 503 HTML
 * page otherwise (asked for in one request, by `Accept`), reduced to the files of a project. The
 * last page seen of each project is kept on disk so that a restarted gateway resolves what it has
 * installed while the index is down.
 */

/** One distribution file of a project, as the index lists it. */
export interface IndexFile {
  filename: string;
  /** Absolute URL. */
  url: string;
  /** Lowercase hex sha256 from the index (the JSON `hashes`, or the HTML link's `#sha256=` fragment). */
  sha256?: string;
  /** PEP 592: false, or true / the reason when the file was yanked. */
  yanked: boolean | string;
  requiresPython?: string;
}

export interface ProjectPage {
  /** Normalised project name. */
  name: string;
  files: IndexFile[];
}

const ACCEPT =
  'application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1';

export interface SimpleIndexOptions {
  /** The index root, ending in `/` (`https://pypi.org/simple/`). */
  index: string;
  /** Origins files may be downloaded from besides the index's own. */
  fileOrigins: readonly string[];
  fetch: Fetch;
  timeoutMs: number;
  maxDownloadBytes: number;
  /** Where the last page of each project is kept. */
  pagesDir: string;
  logger: PluginLogger;
}

export class SimpleIndex {
  private readonly origins: Set<string>;

  constructor(private readonly options: SimpleIndexOptions) {
    this.origins = new Set([
      new URL(options.index).origin,
      ...options.fileOrigins.map((o) => new URL(o).origin),
    ]);
  }

  /**
   * The project's files, from the index; from the page kept at the last contact when the index
   * cannot be reached (logged as a warning). `not_found` for a project the index does not have.
   */
  async project(name: string): Promise<ProjectPage> {
    const pageFile = join(this.options.pagesDir, `${name}.json`);
    let page: ProjectPage;
    try {
      page = await this.fetchProject(name);
    } catch (err) {
      if ((err as PypiRegistryError).reason !== 'unavailable') throw err;
      const kept = await readFile(pageFile, 'utf8').catch(() => undefined);
      if (kept === undefined) throw err;
      this.options.logger.warn(
        { package: name, err: (err as Error).message },
        'package index unreachable; resolved from the project page kept at the last contact',
      );
      return JSON.parse(kept) as ProjectPage;
    }
    await mkdir(this.options.pagesDir, { recursive: true });
    const temporary = `${pageFile}.${randomBytes(4).toString('hex')}`;
    await writeFile(temporary, JSON.stringify(page));
    await rename(temporary, pageFile);
    return page;
  }

  /**
   * Downloads `file` to `target`, hashing as it streams, and refuses it (deleting what was written)
   * unless its sha256 is `expected`: nothing is unpacked before this returns.
   */
  async download(file: IndexFile, expected: string, target: string, packageId: string): Promise<number> {
    const { response } = await this.get(file.url, '*/*', packageId);
    if (!response.ok || !response.body) {
      throw this.statusError(response.status, packageId, `downloading ${file.filename}`);
    }
    const hash = createHash('sha256');
    let bytes = 0;
    const max = this.options.maxDownloadBytes;
    const meter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        bytes += chunk.length;
        if (bytes > max) {
          done(
            new PypiRegistryError('install_failed', `${file.filename} is larger than ${max} bytes`, {
              package: packageId,
            }),
          );
          return;
        }
        hash.update(chunk);
        done(null, chunk);
      },
    });
    try {
      await pipeline(
        Readable.fromWeb(response.body as never),
        meter,
        createWriteStream(target, { flags: 'wx' }),
      );
    } catch (err) {
      await rm(target, { force: true });
      throw err instanceof PypiRegistryError ? err : this.unreachable(err, packageId);
    }
    const actual = hash.digest('hex');
    if (actual !== expected) {
      await rm(target, { force: true });
      throw new PypiIntegrityError(packageId, file.filename, `sha256:${expected}`, `sha256:${actual}`);
    }
    return bytes;
  }

  private async fetchProject(name: string): Promise<ProjectPage> {
    const { response, url } = await this.get(new URL(`${name}/`, this.options.index).href, ACCEPT, name);
    if (!response.ok) throw this.statusError(response.status, name, 'reading its project page');
    const type = (response.headers.get('content-type') ?? '').split(';')[0]?.trim().toLowerCase();
    let body: string;
    try {
      body = await response.text();
    } catch (err) {
      throw this.unreachable(err, name);
    }
    const listed =
      type === 'application/vnd.pypi.simple.v1+json'
        ? filesFromJson(body, url, name)
        : filesFromHtml(body, url);
    // A file hosted elsewhere is left out, not fetched: the plugin talks to its index alone.
    const files = listed.filter((file) => this.origins.has(new URL(file.url).origin));
    if (files.length < listed.length) {
      this.options.logger.warn(
        { package: name, files: listed.length - files.length },
        'ignoring files hosted outside the configured index (add their origin to fileOrigins to allow them)',
      );
    }
    return { name, files };
  }

  /** GET with the plugin's timeout; redirects are followed only to the index's own origins. */
  private async get(
    url: string,
    accept: string,
    packageId: string,
  ): Promise<{ response: Response; url: string }> {
    let target = url;
    for (let hops = 0; hops < 5; hops += 1) {
      let response: Response;
      try {
        response = await this.options.fetch(target, {
          headers: { accept },
          redirect: 'manual',
          signal: AbortSignal.timeout(this.options.timeoutMs),
        });
      } catch (err) {
        throw this.unreachable(err, packageId);
      }
      const location = response.headers.get('location');
      if (response.status < 300 || response.status >= 400 || !location) {
        return { response, url: target };
      }
      await response.body?.cancel();
      const next = new URL(location, target);
      if (!this.origins.has(next.origin)) {
        throw new PypiRegistryError(
          'invalid_metadata',
          `the index redirected ${packageId} to ${next.origin}, outside the configured index`,
          {
            package: packageId,
          },
        );
      }
      target = next.href;
    }
    throw new PypiRegistryError('invalid_metadata', `too many redirects for ${packageId}`, {
      package: packageId,
    });
  }

  private statusError(status: number, packageId: string, doing: string): PypiRegistryError {
    if (status === 404 || status === 410) {
      return new PypiRegistryError(
        'not_found',
        `${packageId} is not on the package index (${status} ${doing})`,
        {
          package: packageId,
          hint: `Check the name, and that ${this.options.index} is the index that has it`,
        },
      );
    }
    return new PypiRegistryError(
      'unavailable',
      `the package index answered ${status} ${doing} for ${packageId}`,
      {
        package: packageId,
        details: { status },
      },
    );
  }

  private unreachable(err: unknown, packageId: string): PypiRegistryError {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
    return new PypiRegistryError('unavailable', `package index unreachable for ${packageId}: ${cause}`, {
      package: packageId,
      details: { index: this.options.index },
      cause: err,
    });
  }
}

interface JsonPage {
  meta?: { 'api-version'?: string };
  files?: {
    filename?: unknown;
    url?: unknown;
    hashes?: Record<string, unknown>;
    yanked?: unknown;
    'requires-python'?: unknown;
  }[];
}

function filesFromJson(body: string, pageUrl: string, name: string): IndexFile[] {
  let page: JsonPage;
  try {
    page = JSON.parse(body) as JsonPage;
  } catch {
    throw new PypiRegistryError('invalid_metadata', `the index's JSON page for ${name} is not JSON`, {
      package: name,
    });
  }
  const major = page.meta?.['api-version']?.split('.')[0];
  if (major !== '1' || !Array.isArray(page.files)) {
    throw new PypiRegistryError(
      'invalid_metadata',
      `the index's JSON page for ${name} is not Simple API v1`,
      {
        package: name,
        details: { apiVersion: page.meta?.['api-version'] ?? null },
      },
    );
  }
  return page.files.flatMap((file) => {
    if (typeof file.filename !== 'string' || typeof file.url !== 'string') return [];
    const sha256 = file.hashes?.sha256;
    const requiresPython = file['requires-python'];
    return [
      {
        filename: file.filename,
        url: new URL(file.url, pageUrl).href,
        ...(typeof sha256 === 'string' ? { sha256: sha256.toLowerCase() } : {}),
        yanked: typeof file.yanked === 'string' ? file.yanked || true : file.yanked === true,
        ...(typeof requiresPython === 'string' && requiresPython !== '' ? { requiresPython } : {}),
      },
    ];
  });
}

/** PEP 503: one `<a>` per file, the hash in the URL's fragment, attributes entity-decoded. */
function filesFromHtml(body: string, pageUrl: string): IndexFile[] {
  const files: IndexFile[] = [];
  let base = pageUrl;
  let anchor: { href: string; attributes: Record<string, string>; text: string } | undefined;
  const parser = new Parser(
    {
      onopentag(tag, attributes) {
        if (tag === 'base' && attributes.href) base = new URL(attributes.href, pageUrl).href;
        if (tag === 'a' && attributes.href) anchor = { href: attributes.href, attributes, text: '' };
      },
      ontext(text) {
        if (anchor) anchor.text += text;
      },
      onclosetag(tag) {
        if (tag !== 'a' || !anchor) return;
        const url = new URL(anchor.href, base);
        const fragment = new URLSearchParams(url.hash.slice(1));
        url.hash = '';
        const sha256 = fragment.get('sha256');
        const yanked = anchor.attributes['data-yanked'];
        const requiresPython = anchor.attributes['data-requires-python'];
        files.push({
          filename: anchor.text.trim() || decodeURIComponent(url.pathname.split('/').pop() ?? ''),
          url: url.href,
          ...(sha256 ? { sha256: sha256.toLowerCase() } : {}),
          yanked: yanked === undefined ? false : yanked || true,
          ...(requiresPython ? { requiresPython } : {}),
        });
        anchor = undefined;
      },
    },
    { decodeEntities: true, lowerCaseTags: true, lowerCaseAttributeNames: true },
  );
  parser.end(body);
  return files;
}
