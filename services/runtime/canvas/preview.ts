import { createReadStream } from 'node:fs';
import { extname } from 'node:path';
import Router from '@koa/router';
import type { Context } from 'koa';
import { SigilError } from '@sigil/plugin-api';
import { previewFile } from '@sigil/plugin-api/canvas';
import type { CanvasService } from './service.ts';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.htm': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
};

/** The run's preview token: 24 random bytes, base64url. */
const TOKEN = /^[A-Za-z0-9_-]{32}$/;

const notFound = () =>
  new SigilError('not_found', 'No such preview file', { details: { reason: 'preview_not_found' } });

/**
 * `GET /canvas/preview/<token>/<path>`: a run's workspace files, read-only, to whoever holds the
 * run's unguessable token (a browser node, the owner's browser), never `.git`, never outside the
 * workspace (symlinks resolved), under a sandboxing Content-Security-Policy: a preview runs no
 * script against the runtime's origin.
 */
export function previewRouter(canvas: CanvasService): Router {
  const router = new Router();
  const serve = async (ctx: Context, token: string, path: string[]) => {
    const run = TOKEN.test(token) ? await canvas.runs.byPreviewToken(token) : undefined;
    if (!run) throw notFound();
    const file = await previewFile(canvas.workspaces.dirOf(run.id), path);
    if (file === undefined) throw notFound();
    ctx.set('Content-Type', CONTENT_TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream');
    ctx.set(
      'Content-Security-Policy',
      "sandbox allow-scripts; default-src 'self' data:; style-src 'self' 'unsafe-inline'",
    );
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Cache-Control', 'no-store');
    ctx.body = createReadStream(file);
  };
  router.get('/preview/:token/', (ctx) => serve(ctx, ctx.params.token as string, []));
  router.get('/preview/:token/*path', (ctx) =>
    serve(
      ctx,
      ctx.params.token as string,
      (ctx.params.path as unknown as string[] | string).toString().split(/[/,]/),
    ),
  );
  return router;
}
