import { spawn } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GIT_ENV } from './git.ts';

/**
 * git's smart HTTP protocol as real hosts speak it: `git http-backend` (the CGI program git ships)
 * behind node's HTTP server, serving the bare repositories under a directory, pushes included.
 */

/** Answers one request with `git http-backend` for the repositories under `root`; `path` is the repository's path and what follows. */
export function serveGitHttp(
  root: string,
  path: string,
  request: IncomingMessage,
  response: ServerResponse,
): void {
  const header = (name: string) => request.headers[name]?.toString();
  const optional = (variable: string, value: string | undefined) =>
    value === undefined ? {} : { [variable]: value };
  const child = spawn('git', ['http-backend'], {
    env: {
      ...GIT_ENV,
      GIT_PROJECT_ROOT: root,
      GIT_HTTP_EXPORT_ALL: '1',
      // http-backend takes pushes only from a user the server authenticated.
      REMOTE_USER: 'sigil-test',
      REMOTE_ADDR: request.socket.remoteAddress ?? '127.0.0.1',
      PATH_INFO: path,
      QUERY_STRING: new URL(request.url ?? '/', 'http://localhost').search.slice(1),
      REQUEST_METHOD: request.method ?? 'GET',
      CONTENT_TYPE: header('content-type') ?? '',
      ...optional('CONTENT_LENGTH', header('content-length')),
      ...optional('HTTP_CONTENT_ENCODING', header('content-encoding')),
      ...optional('GIT_PROTOCOL', header('git-protocol')),
    },
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  request.pipe(child.stdin);
  let head = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    child.stdout.off('data', onData);
    let status = 200;
    for (const line of head.subarray(0, end).toString().split('\r\n')) {
      const colon = line.indexOf(':');
      const [name, value] = [line.slice(0, colon).trim(), line.slice(colon + 1).trim()];
      if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10);
      else response.setHeader(name, value);
    }
    response.writeHead(status);
    response.write(head.subarray(end + 4));
    child.stdout.pipe(response);
  };
  child.stdout.on('data', onData);
  child.on('close', () => {
    if (!response.headersSent) response.writeHead(500).end();
  });
}

export interface GitHttpServer {
  /** `http://127.0.0.1:<port>/`: a repository's URL is this and its path under the root. */
  url: string;
  /** Each request's method, URL and Authorization header, in order. */
  requests: { method: string; url: string; authorization: string | undefined }[];
  close(): Promise<void>;
}

export interface GitHttpServerOptions {
  /** Whether a request's `Authorization` header lets it in (a 401 asking for Basic otherwise); all by default. */
  authorize?: (authorization: string | undefined) => boolean;
  /** Runs before a push's pack is received: a test moves the branch here to race the pusher. */
  beforeReceivePack?: () => void;
}

/** A smart HTTP git server on a free loopback port over the bare repositories under `root`. */
export async function startGitHttpServer(
  root: string,
  options: GitHttpServerOptions = {},
): Promise<GitHttpServer> {
  const requests: GitHttpServer['requests'] = [];
  const server = createServer((request, response) => {
    const authorization = request.headers.authorization;
    requests.push({ method: request.method ?? 'GET', url: request.url ?? '/', authorization });
    if (options.authorize && !options.authorize(authorization)) {
      response.writeHead(401, { 'WWW-Authenticate': 'Basic realm="sigil-test"' }).end();
      return;
    }
    const path = new URL(request.url ?? '/', 'http://localhost').pathname;
    if (request.method === 'POST' && path.endsWith('/git-receive-pack')) options.beforeReceivePack?.();
    serveGitHttp(root, path, request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
