import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { git, GIT_ENV } from './git.ts';
import { serveGitHttp } from './git-http.ts';

/**
 * A stand-in for GitHub on 127.0.0.1, as the local LLM stand-in is for model APIs: the REST v3 routes
 * the github-pull-request node uses, under `/api/` (GET /user, GET /repos/{owner}/{repo}, POST
 * /user/repos, POST /orgs/{org}/repos, GET and POST /repos/{owner}/{repo}/pulls), over real bare
 * repositories served by `git http-backend` under `/git/`. As GitHub does, the API takes the token as
 * `Authorization: Bearer`, git as Basic with user `x-access-token` and the token for password.
 */

export interface StandInPull {
  number: number;
  html_url: string;
  state: 'open';
  title: string;
  body: string;
  head: { ref: string; sha: string };
  base: { ref: string; repo: { full_name: string } };
}

export interface ForgeStandIn {
  apiUrl: string;
  /** Each request to the API or to git: its method, path and query. */
  requests: { method: string; url: string }[];
  /** Called with each request as it arrives (a test cancels a run there). */
  onRequest: (request: { method: string; url: string }) => void;
  pulls: StandInPull[];
  /** The bare repository of `owner/name`, made as the API makes it (with a first commit on main when `autoInit`). */
  createRepository(owner: string, name: string, autoInit: boolean): string;
  repositoryDir(owner: string, name: string): string;
  close(): Promise<void>;
}

/** A route's answer to the path's captured segments, the JSON body and the URL: a status and JSON. */
type Route = (segments: string[], body: Record<string, unknown>, url: URL) => [number, unknown];

export async function startForgeStandIn(
  root: string,
  /** `accepts`: whether a token is one the stand-in's user holds; `login`: that user's name. */
  { accepts, login }: { accepts: (token: string) => boolean; login: string },
): Promise<ForgeStandIn> {
  mkdirSync(root, { recursive: true });
  const requests: ForgeStandIn['requests'] = [];
  const pulls: StandInPull[] = [];
  let base = '';
  const repositoryDir = (owner: string, name: string) => join(root, owner, `${name}.git`);
  const branchTip = (dir: string, branch: string): string | undefined => {
    try {
      return git(dir, 'rev-parse', '--verify', '--quiet', `refs/heads/${branch}`);
    } catch {
      return undefined;
    }
  };
  const repository = (owner: string, name: string) => ({
    name,
    full_name: `${owner}/${name}`,
    owner: { login: owner },
    default_branch: 'main',
    html_url: `${base}/${owner}/${name}`,
    clone_url: `${base}/git/${owner}/${name}.git`,
  });
  const createRepository = (owner: string, name: string, autoInit: boolean) => {
    const dir = repositoryDir(owner, name);
    git(root, 'init', '--quiet', '--bare', '--initial-branch=main', dir);
    if (autoInit) {
      const write = (args: string[], input: string) =>
        execFileSync('git', args, { cwd: dir, env: GIT_ENV, input, encoding: 'utf8' }).trim();
      const readme = write(['hash-object', '-w', '--stdin'], `# ${name}\n`);
      const tree = write(['mktree'], `100644 blob ${readme}\tREADME.md\n`);
      git(dir, 'update-ref', 'refs/heads/main', git(dir, 'commit-tree', tree, '-m', 'Initial commit'));
    }
    return dir;
  };
  const create = (owner: string, body: Record<string, unknown>): [number, unknown] => {
    const name = String(body.name);
    if (existsSync(repositoryDir(owner, name)))
      return [422, { message: 'name already exists on this account' }];
    createRepository(owner, name, body.auto_init === true);
    return [201, repository(owner, name)];
  };
  const existing = (owner: string, name: string, then: () => [number, unknown]): [number, unknown] =>
    existsSync(repositoryDir(owner, name)) ? then() : [404, { message: 'Not Found' }];
  const routes: [string, RegExp, Route][] = [
    ['GET', /^\/user$/, () => [200, { login }]],
    ['POST', /^\/user\/repos$/, (_, body) => create(login, body)],
    ['POST', /^\/orgs\/([^/]+)\/repos$/, ([org = ''], body) => create(org, body)],
    [
      'GET',
      /^\/repos\/([^/]+)\/([^/]+)$/,
      ([owner = '', name = '']) => existing(owner, name, () => [200, repository(owner, name)]),
    ],
    [
      'GET',
      /^\/repos\/([^/]+)\/([^/]+)\/pulls$/,
      ([owner = '', name = ''], _, url) =>
        existing(owner, name, () => [
          200,
          pulls.filter(
            (pull) =>
              pull.base.repo.full_name === `${owner}/${name}` &&
              `${owner}:${pull.head.ref}` === url.searchParams.get('head'),
          ),
        ]),
    ],
    [
      'POST',
      /^\/repos\/([^/]+)\/([^/]+)\/pulls$/,
      ([owner = '', name = ''], body) =>
        existing(owner, name, () => {
          const [head, baseRef] = [String(body.head), String(body.base)];
          const headSha = branchTip(repositoryDir(owner, name), head);
          if (!headSha || !branchTip(repositoryDir(owner, name), baseRef) || head === baseRef)
            return [422, { message: 'Validation Failed' }];
          const number = pulls.length + 1;
          const pull: StandInPull = {
            number,
            html_url: `${base}/${owner}/${name}/pull/${number}`,
            state: 'open',
            title: String(body.title),
            body: String(body.body ?? ''),
            head: { ref: head, sha: headSha },
            base: { ref: baseRef, repo: { full_name: `${owner}/${name}` } },
          };
          pulls.push(pull);
          return [201, pull];
        }),
    ],
  ];

  /** Whether an `Authorization` header carries a token the stand-in accepts: Bearer (the API), Basic with user x-access-token (git). */
  const authorized = (authorization: string | undefined, scheme: 'Bearer' | 'Basic') => {
    if (!authorization?.startsWith(`${scheme} `)) return false;
    const credential = authorization.slice(scheme.length + 1);
    if (scheme === 'Bearer') return accepts(credential);
    const [user, token] = Buffer.from(credential, 'base64').toString().split(/:(.*)/s);
    return user === 'x-access-token' && token !== undefined && accepts(token);
  };

  const api = async (request: IncomingMessage, response: ServerResponse, url: URL) => {
    const answer = (status: number, json: unknown) =>
      response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json));
    if (!authorized(request.headers.authorization, 'Bearer'))
      return answer(401, { message: 'Bad credentials' });
    const path = url.pathname.slice('/api'.length);
    const route = routes.find(([method, pattern]) => method === request.method && pattern.test(path));
    if (!route) return answer(404, { message: 'Not Found' });
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body =
      chunks.length > 0 ? (JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>) : {};
    answer(...route[2]((path.match(route[1]) ?? []).slice(1), body, url));
  };
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    const seen = { method: request.method ?? 'GET', url: request.url ?? '/' };
    requests.push(seen);
    standIn.onRequest(seen);
    if (url.pathname.startsWith('/api/'))
      return void api(request, response, url).catch(() => response.writeHead(500).end());
    if (!url.pathname.startsWith('/git/')) return void response.writeHead(404).end();
    if (!authorized(request.headers.authorization, 'Basic'))
      return void response.writeHead(401, { 'WWW-Authenticate': 'Basic realm="stand-in"' }).end();
    serveGitHttp(root, url.pathname.slice('/git'.length), request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const standIn: ForgeStandIn = {
    apiUrl: `${base}/api`,
    requests,
    onRequest: () => {},
    pulls,
    createRepository,
    repositoryDir,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return standIn;
}
