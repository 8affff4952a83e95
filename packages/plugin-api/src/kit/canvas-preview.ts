import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { previewFile } from '../canvas/preview.ts';

/**
 * A workspace served read-only over HTTP on 127.0.0.1, as the runtime serves a run's preview: a path
 * with an unguessable token, then the files `previewFile` finds.
 */
export async function servePreview(dir: string): Promise<{ url: string; close(): Promise<void> }> {
  const prefix = `/preview/${randomBytes(24).toString('base64url')}/`;
  const server = createServer((req, res) => {
    const notFound = () => {
      res.statusCode = 404;
      res.end();
    };
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://preview').pathname);
    if (!path.startsWith(prefix)) return notFound();
    previewFile(dir, path.slice(prefix.length).split('/'))
      .then((file) => {
        if (file === undefined) return notFound();
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
