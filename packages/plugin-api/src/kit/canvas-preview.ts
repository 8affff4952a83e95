import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve, sep } from 'node:path';

/**
 * A workspace served read-only over HTTP on 127.0.0.1, as the runtime serves a run's preview: a path
 * with an unguessable token, `index.html` for a folder, never `.git` nor outside the workspace.
 */
export async function servePreview(dir: string): Promise<{ url: string; close(): Promise<void> }> {
  const prefix = `/preview/${randomBytes(24).toString('base64url')}/`;
  const root = await realpath(dir);
  const server = createServer((req, res) => {
    const notFound = () => {
      res.statusCode = 404;
      res.end();
    };
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://preview').pathname);
    if (!path.startsWith(prefix)) return notFound();
    const segments = path.slice(prefix.length).split('/');
    if (segments.at(-1) === '') segments[segments.length - 1] = 'index.html';
    if (segments.some((segment) => segment === '' || segment === '..' || segment === '.git'))
      return notFound();
    realpath(resolve(root, ...segments))
      .then(async (file) => {
        if (!file.startsWith(root + sep) || !(await stat(file)).isFile()) return notFound();
        res.setHeader(
          'Content-Type',
          file.endsWith('.html') ? 'text/html; charset=utf-8' : 'application/octet-stream',
        );
        createReadStream(file).pipe(res);
      })
      .catch(notFound);
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${prefix}`,
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}
