import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BuiltWheel } from './python-wheels.ts';
import { sha256Hex } from './python-wheels.ts';

/**
 * A package index on 127.0.0.1 for tests, speaking the Simple Repository API as pypi.org does: PEP 691
 * JSON when the client's `Accept` asks for it, the PEP 503 HTML page otherwise (or always, with
 * `formats: ['html']`, like an index that predates PEP 691). Projects are served under their
 * normalised name; another spelling is redirected there. Files carry their sha256 (the JSON `hashes`,
 * the link's `#sha256=` fragment) unless told otherwise, so a test can serve bytes that do not match
 * their hash, a yanked file or a file with no hash at all.
 *
 *     const index = await startPythonIndex({ projects: { 'sigil-echo-server': [{ ...wheel }] } });
 *     … index.url (http://127.0.0.1:<port>/simple/) …
 *     await index.stop();
 */

export interface IndexedFile {
  filename: string;
  bytes: Buffer;
  /** The sha256 the index lists: the bytes' own unless given; `null` lists none. */
  sha256?: string | null;
  /** PEP 592: true, or the reason. */
  yanked?: boolean | string;
  requiresPython?: string;
}

export interface PythonIndex {
  /** The Simple API root, ending in `/`. */
  url: string;
  /** Paths requested so far, in order (`/simple/<project>/`, `/files/<name>`). */
  readonly requests: readonly string[];
  /** Adds files to a project (made when new). */
  add(project: string, ...files: IndexedFile[]): void;
  /** Serves other bytes (and their hash) under a file's name: a file republished in place. */
  replace(file: IndexedFile): void;
  /** Closes the server: from now on connections are refused, as from an index that is down. */
  stop(): Promise<void>;
}

/** A wheel made by test support, as the index serves it. */
export const served = (
  wheel: BuiltWheel,
  extra: Omit<IndexedFile, 'filename' | 'bytes'> = {},
): IndexedFile => ({
  filename: wheel.filename,
  bytes: wheel.bytes,
  sha256: wheel.sha256,
  ...extra,
});

const normalize = (name: string): string => name.replace(/[-_.]+/g, '-').toLowerCase();
const JSON_TYPE = 'application/vnd.pypi.simple.v1+json';

const escapeHtml = (text: string): string =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

export async function startPythonIndex(
  options: { projects?: Record<string, IndexedFile[]>; formats?: readonly ('json' | 'html')[] } = {},
): Promise<PythonIndex> {
  const formats = options.formats ?? ['json', 'html'];
  const projects = new Map<string, { name: string; files: IndexedFile[] }>();
  const files = new Map<string, IndexedFile>();
  const requests: string[] = [];
  const add = (project: string, ...added: IndexedFile[]) => {
    const entry = projects.get(normalize(project)) ?? { name: project, files: [] };
    entry.files.push(...added);
    projects.set(normalize(project), entry);
    for (const file of added) files.set(file.filename, file);
  };
  for (const [project, list] of Object.entries(options.projects ?? {})) add(project, ...list);
  const replace = (file: IndexedFile) => {
    const old = files.get(file.filename);
    if (!old) throw new Error(`the index has no file ${file.filename} to replace`);
    files.set(file.filename, file);
    for (const project of projects.values()) {
      project.files = project.files.map((listed) => (listed === old ? file : listed));
    }
  };

  const listedHash = (file: IndexedFile) => (file.sha256 === undefined ? sha256Hex(file.bytes) : file.sha256);

  const projectPage = (req: IncomingMessage, res: ServerResponse, name: string) => {
    const project = projects.get(normalize(name));
    if (!project) return res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    if (normalize(name) !== name) {
      return res.writeHead(301, { location: `/simple/${normalize(name)}/` }).end();
    }
    const wantsJson = formats.includes('json') && (req.headers.accept ?? '').includes(JSON_TYPE);
    if (wantsJson) {
      const body = {
        meta: { 'api-version': '1.1' },
        name: normalize(project.name),
        files: project.files.map((file) => {
          const sha256 = listedHash(file);
          return {
            filename: file.filename,
            // Relative to the page, as pypi.org's are not but PEP 691 allows: the client must resolve it.
            url: `../../files/${encodeURIComponent(file.filename)}`,
            hashes: sha256 === null ? {} : { sha256 },
            ...(file.requiresPython ? { 'requires-python': file.requiresPython } : {}),
            ...(file.yanked ? { yanked: file.yanked } : {}),
          };
        }),
      };
      return res.writeHead(200, { 'content-type': JSON_TYPE }).end(JSON.stringify(body));
    }
    const links = project.files.map((file) => {
      const sha256 = listedHash(file);
      const attributes = [
        `href="/files/${encodeURIComponent(file.filename)}${sha256 === null ? '' : `#sha256=${sha256}`}"`,
        ...(file.requiresPython ? [`data-requires-python="${escapeHtml(file.requiresPython)}"`] : []),
        ...(file.yanked ? [`data-yanked="${file.yanked === true ? '' : escapeHtml(file.yanked)}"`] : []),
      ];
      return `    <a ${attributes.join(' ')}>${escapeHtml(file.filename)}</a><br/>`;
    });
    const html = `<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" content="1.1"><title>Links for ${escapeHtml(project.name)}</title></head>\n  <body>\n    <h1>Links for ${escapeHtml(project.name)}</h1>\n${links.join('\n')}\n  </body>\n</html>\n`;
    return res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html);
  };

  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://index').pathname;
    requests.push(path);
    const page = /^\/simple\/([^/]+)\/?$/.exec(path);
    if (req.method === 'GET' && page?.[1]) return projectPage(req, res, decodeURIComponent(page[1]));
    const download = /^\/files\/([^/]+)$/.exec(path);
    const file = download?.[1] ? files.get(decodeURIComponent(download[1])) : undefined;
    if (req.method === 'GET' && file) {
      return res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(file.bytes);
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/simple/`,
    requests,
    add,
    replace,
    stop: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}
