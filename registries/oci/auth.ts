import type { Clock, Fetch, SecretRegistry } from '@sigil/plugin-api';
import { OciRegistryError } from './errors.ts';
import type { Repository } from './reference.ts';

export interface Credentials {
  username: string;
  password: string;
}

/** One challenge of a WWW-Authenticate header: its scheme (lowercase) and auth-params. */
export interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

const TOKEN68_OR_NAME = /^\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*/;
const AUTH_PARAM = /([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]*))\s*(?:,\s*|$)/y;

/**
 * The first challenge of a WWW-Authenticate header (RFC 9110 §11.6.1), as registries send one.
 * Hand-written: http-auth-utils refuses the `service` parameter the distribution spec's Bearer
 * challenge carries, and auth-header is unmaintained and untyped; the grammar is two regexes.
 */
export function parseChallenge(header: string): Challenge | undefined {
  const scheme = TOKEN68_OR_NAME.exec(header);
  if (!scheme?.[1]) return undefined;
  const params: Record<string, string> = {};
  AUTH_PARAM.lastIndex = scheme[0].length;
  for (let match = AUTH_PARAM.exec(header); match; match = AUTH_PARAM.exec(header)) {
    const [, name = '', quoted, plain] = match;
    params[name.toLowerCase()] = quoted === undefined ? (plain ?? '') : quoted.replace(/\\(.)/g, '$1');
  }
  return { scheme: scheme[1].toLowerCase(), params };
}

export interface RegistryAuthOptions {
  fetch: Fetch;
  clock: Clock;
  /** By registry domain (`host[:port]`). */
  credentials: Readonly<Record<string, Credentials>>;
  /** Whether credentials may travel over plain http to this `host[:port]`. */
  plainHttpAllowed(domain: string): boolean;
  /** Tokens are added while they are used, so no log line shows one. */
  secrets: SecretRegistry;
  timeoutMs: number;
}

/** The distribution spec's default lifetime of a token that does not say. */
const DEFAULT_TOKEN_SECONDS = 60;
/** A token this close to expiry is not sent: the request might arrive after it. */
const EXPIRY_MARGIN_MS = 5_000;

/**
 * What a registry asks for: nothing, Basic credentials from the config, or a Bearer token from the
 * realm its challenge names (the distribution token spec), fetched with those credentials when
 * there are some and anonymously otherwise. Tokens are kept per registry and scope until they expire.
 */
export class RegistryAuth {
  private readonly tokens = new Map<string, { header: string; token: string; expires: number }>();
  /** Registries that answered with a Basic challenge: later requests carry the credentials at once. */
  private readonly basic = new Set<string>();

  constructor(private readonly options: RegistryAuthOptions) {}

  /** The Authorization header known to work for `scope` of this registry, if any. */
  known(repository: Repository, scope: string): string | undefined {
    if (this.basic.has(repository.origin)) return this.basicHeader(repository);
    const key = `${repository.origin} ${scope}`;
    const token = this.tokens.get(key);
    if (!token) return undefined;
    if (token.expires - EXPIRY_MARGIN_MS > this.options.clock.now().getTime()) return token.header;
    this.forget(key);
    return undefined;
  }

  /** Answers a 401 with the Authorization header its challenge asks for, or rejects saying why not. */
  async answer(repository: Repository, scope: string, header: string | null): Promise<string> {
    const challenge = header === null ? undefined : parseChallenge(header);
    if (challenge?.scheme === 'basic') {
      const basic = this.basicHeader(repository);
      if (!basic) {
        throw denied(
          repository,
          `${repository.domain} asks for credentials for ${repository.name}, and none are configured`,
        );
      }
      this.basic.add(repository.origin);
      return basic;
    }
    if (challenge?.scheme !== 'bearer' || !challenge.params.realm) {
      throw new OciRegistryError(
        'invalid_metadata',
        `${repository.domain} refused ${repository.name} without a challenge this client can answer`,
        { package: repository.name, challenge: challenge?.scheme ?? null },
      );
    }
    return this.bearer(repository, scope, challenge.params);
  }

  private async bearer(
    repository: Repository,
    scope: string,
    params: Record<string, string>,
  ): Promise<string> {
    const realm = new URL(URL.canParse(params.realm ?? '') ? (params.realm ?? '') : 'invalid:');
    const credentials = this.options.credentials[repository.domain];
    const plain = realm.protocol === 'http:' && !this.options.plainHttpAllowed(realm.host);
    if (!['http:', 'https:'].includes(realm.protocol) || (plain && credentials)) {
      throw new OciRegistryError(
        'invalid_metadata',
        `${repository.domain} names a token realm this client will not use: ${realm.protocol === 'http:' ? 'plain http' : 'not an http(s) URL'}`,
        { package: repository.name },
      );
    }
    realm.searchParams.set('scope', params.scope ?? scope);
    if (params.service) realm.searchParams.set('service', params.service);
    let response: Response;
    try {
      response = await this.options.fetch(realm, {
        headers: credentials ? { authorization: basicOf(credentials) } : {},
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (err) {
      throw new OciRegistryError(
        'unavailable',
        `the token service of ${repository.domain} is unreachable: ${causeOf(err)}`,
        { package: repository.name },
      );
    }
    if (response.status === 401 || response.status === 403) {
      await response.body?.cancel();
      const who = credentials ? 'the configured credentials' : 'an anonymous pull';
      throw denied(
        repository,
        `the token service of ${repository.domain} refused ${who} of ${repository.name}`,
      );
    }
    const body = response.ok ? ((await response.json().catch(() => ({}))) as Record<string, unknown>) : {};
    const token = [body.token, body.access_token].find((value) => typeof value === 'string' && value !== '');
    if (typeof token !== 'string') {
      throw new OciRegistryError(
        'unavailable',
        `the token service of ${repository.domain} answered ${response.status} without a token`,
        { package: repository.name },
      );
    }
    const seconds =
      typeof body.expires_in === 'number' && body.expires_in > 0 ? body.expires_in : DEFAULT_TOKEN_SECONDS;
    const key = `${repository.origin} ${scope}`;
    this.forget(key);
    this.options.secrets.add(token);
    const entry = {
      header: `Bearer ${token}`,
      token,
      expires: this.options.clock.now().getTime() + seconds * 1000,
    };
    this.tokens.set(key, entry);
    return entry.header;
  }

  private basicHeader(repository: Repository): string | undefined {
    const credentials = this.options.credentials[repository.domain];
    return credentials && basicOf(credentials);
  }

  private forget(key: string): void {
    const token = this.tokens.get(key);
    if (!token) return;
    this.tokens.delete(key);
    this.options.secrets.remove(token.token);
  }
}

const basicOf = ({ username, password }: Credentials): string =>
  `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;

/**
 * Access refused. Registries refuse a repository that does not exist exactly as one the caller may
 * not read (Docker Hub does), so this is `not_found`.
 */
export const denied = (repository: Repository, message: string): OciRegistryError =>
  new OciRegistryError(
    'not_found',
    message,
    { package: repository.name, denied: true },
    {
      hint: `Check that ${repository.name} exists and that credentials for ${repository.domain} are configured if it is private`,
    },
  );

/** Why a fetch rejected, as an operator can read it: the socket's error code when there is one. */
export function causeOf(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
  if (typeof cause?.code === 'string') return cause.code;
  if (err instanceof Error && err.name === 'TimeoutError') return 'timed out';
  return err instanceof Error ? err.message : String(err);
}
