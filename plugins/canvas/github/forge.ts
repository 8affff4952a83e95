import { z } from 'zod';
import { SigilError, type ErrorCode } from '@sigil/plugin-api';
import { authorizationHeader, withDeadline } from '@sigil/plugin-api/canvas';

/** The REST v3 calls of a GitHub-style forge the github-pull-request node makes, with the wallet's token. */

const USER = z.object({ login: z.string().min(1) });
const REPOSITORY = z.object({
  full_name: z.string().min(1),
  html_url: z.string(),
  clone_url: z.string(),
  default_branch: z.string().min(1),
});
const PULL_REQUEST = z.object({ number: z.number().int(), html_url: z.string() });

export type ForgeRepository = z.infer<typeof REPOSITORY>;
export type ForgePullRequest = z.infer<typeof PULL_REQUEST>;

export interface ForgeOptions {
  apiUrl: string;
  token: string;
  signal: AbortSignal;
  /** Longest each request may take. */
  timeoutMs: number;
}

/** Each failing status's code and reason; any other is `unavailable`, reason `forge_error`. */
const FAILURES: Readonly<Record<number, [ErrorCode, string]>> = {
  401: ['unauthorized', 'forge_unauthorized'],
  403: ['forbidden', 'forge_forbidden'],
  404: ['not_found', 'forge_not_found'],
  422: ['conflict', 'forge_rejected'],
};

interface Reply {
  status: number;
  json: unknown;
}

export class Forge {
  constructor(private readonly options: ForgeOptions) {}

  /** The login of the token's user. */
  async user(): Promise<string> {
    return this.expect(USER, 'GET', '/user').then((user) => user.login);
  }

  /**
   * `owner/name`, created when missing (under the token's user, or the organization `owner`) with a
   * first commit on its default branch, so that a pull request has a base.
   */
  async repository(
    owner: string,
    name: string,
    creation: { private: boolean; ownedByUser: boolean },
  ): Promise<{ repository: ForgeRepository; created: boolean }> {
    const path = `/repos/${segment(owner)}/${segment(name)}`;
    const found = await this.send('GET', path);
    if (found.status !== 404)
      return { repository: this.parse(REPOSITORY, 'GET', path, found), created: false };
    const createPath = creation.ownedByUser ? '/user/repos' : `/orgs/${segment(owner)}/repos`;
    const made = await this.send('POST', createPath, { name, private: creation.private, auto_init: true });
    // 422: it exists after all (made by a run alongside this one).
    if (made.status === 422)
      return { repository: await this.expect(REPOSITORY, 'GET', path), created: false };
    return { repository: this.parse(REPOSITORY, 'POST', createPath, made), created: true };
  }

  /** The pull request of `head` into `base`: the one already opened from `head` (a re-run), or a new one. */
  async pullRequest(
    owner: string,
    name: string,
    request: { head: string; base: string; title: string; body: string },
  ): Promise<{ pullRequest: ForgePullRequest; opened: boolean }> {
    const path = `/repos/${segment(owner)}/${segment(name)}/pulls`;
    const query = new URLSearchParams({ head: `${owner}:${request.head}`, state: 'all' });
    const [earlier] = await this.expect(z.array(PULL_REQUEST), 'GET', `${path}?${query}`);
    if (earlier !== undefined) return { pullRequest: earlier, opened: false };
    return { pullRequest: await this.expect(PULL_REQUEST, 'POST', path, request), opened: true };
  }

  private async expect<T>(schema: z.ZodType<T>, method: string, path: string, body?: unknown): Promise<T> {
    return this.parse(schema, method, path, await this.send(method, path, body));
  }

  private parse<T>(schema: z.ZodType<T>, method: string, path: string, reply: Reply): T {
    const what = `${method} ${path.split('?')[0]}`;
    if (reply.status < 200 || reply.status > 299) {
      const [code, reason] = FAILURES[reply.status] ?? ['unavailable', 'forge_error'];
      const said = z.object({ message: z.string() }).safeParse(reply.json).data?.message;
      // The forge's own words help, but never carry the token back out.
      const detail =
        said === undefined ? '' : `: ${said.slice(0, 200).replaceAll(this.options.token, '[token]')}`;
      throw new SigilError(code, `The forge answered ${what} with ${reply.status}${detail}`, {
        details: { reason, status: reply.status },
      });
    }
    const parsed = schema.safeParse(reply.json);
    if (!parsed.success)
      throw new SigilError('unavailable', `The forge's answer to ${what} is not what GitHub's API returns`, {
        details: { reason: 'forge_invalid_response' },
      });
    return parsed.data;
  }

  private async send(method: string, path: string, body?: unknown): Promise<Reply> {
    const { apiUrl, token, signal, timeoutMs } = this.options;
    const url = `${apiUrl.replace(/\/$/, '')}${path}`;
    const timedOut = () =>
      new SigilError('unavailable', `The forge took longer than ${timeoutMs} ms to answer ${method}`, {
        details: { reason: 'forge_timeout' },
      });
    return withDeadline(
      signal,
      timeoutMs,
      async (bounded) => {
        const response = await fetch(url, {
          method,
          headers: {
            accept: 'application/vnd.github+json',
            authorization: authorizationHeader(token, 'bearer'),
            'user-agent': 'sigil-canvas',
            'x-github-api-version': '2022-11-28',
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          signal: bounded,
        }).catch((err: unknown) => {
          if (bounded.aborted) throw err;
          throw new SigilError('unavailable', `The forge at ${new URL(url).host} did not answer`, {
            hint: "Check the canvas-github plugin's apiUrl and that the forge is up",
            details: { reason: 'forge_unreachable' },
          });
        });
        const json: unknown = await response.json().catch(() => undefined);
        bounded.throwIfAborted();
        return { status: response.status, json };
      },
      timedOut,
    );
  }
}

/** A path segment of an owner or repository name, escaped. */
const segment = (name: string) => encodeURIComponent(name);
