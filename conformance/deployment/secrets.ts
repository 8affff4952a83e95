import { randomBytes } from 'node:crypto';
import { ensure, excerpt, failWith, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import type { HttpClient, HttpRequest, HttpResponse } from '../http.ts';
import { findServableServer, listServerIds, readServer, type ServerView } from './catalog.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectStatus } from './expect.ts';
import { McpConnection, sampleArguments, textOf, type CallToolResult, type McpTool } from './mcp.ts';
import { callKeepingMeta, callOverRest, findField, findProof } from './proofs.ts';
import { bearer, GATEWAY_AUTH, signIn } from './wallet.ts';

/**
 * Per-wallet, per-server secrets (gateway spec part 2, Secret; part 4, /api/secrets/:serverId; part 7,
 * redaction; part 8, injection as environment variables). The spec fixes the routes, not the bodies:
 * a secret is stored as Sigil takes it (`{"secrets": {"NAME": "value"}}`), and stored names are read
 * from a list, a `names` list or a `secrets` list or map. Only names a server declares can be stored,
 * so these checks need a server whose details declare one (`secrets`: names, or objects with `name`);
 * redaction also needs one of its tools to read the environment (`env`, `get-env`, `printenv`…).
 */

const SPEC_SECRET =
  'gateway spec part 2, Secret: "per wallet and per server; recorded by name (never value) in execution proofs"';
const SPEC_SECRETS_API = `gateway spec part 4, REST endpoints: "POST, GET, DELETE /api/secrets/:serverId: manage secrets"; ${SPEC_SECRET}`;

const secretsPath = (serverId: string) => `/api/secrets/${encodeURIComponent(serverId)}`;

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A value nobody else would send: if it shows up anywhere, it leaked. Marked secret for the report. */
function canary(context: DeploymentContext): string {
  const value = `sigil-conformance-canary-${randomBytes(12).toString('hex')}`;
  context.secret(value);
  return value;
}

/** The secret names a server's details declare. */
export function declaredSecrets(view: ServerView): string[] {
  const secrets = view.details.secrets;
  if (!Array.isArray(secrets)) return [];
  return secrets.flatMap((secret) =>
    typeof secret === 'string'
      ? [secret]
      : isObject(secret) && typeof secret.name === 'string'
        ? [secret.name]
        : [],
  );
}

/** The secret names a secrets response lists as stored (not the ones merely declared). */
export function storedNames(body: unknown): string[] | undefined {
  const names = (list: unknown[]) =>
    list.flatMap((item) =>
      typeof item === 'string' ? [item] : isObject(item) && typeof item.name === 'string' ? [item.name] : [],
    );
  if (Array.isArray(body)) return names(body);
  if (!isObject(body)) return undefined;
  if (Array.isArray(body.names)) return names(body.names);
  if (Array.isArray(body.secrets)) return names(body.secrets);
  if (isObject(body.secrets)) return Object.keys(body.secrets);
  return undefined;
}

/** `env`, `get-env`, `get_env`, `getEnv`, `printenv`, `read_environment`: a tool that reads the environment. */
export function readsEnvironment(name: string): boolean {
  const words = name
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/);
  return words.some((word) => ['env', 'environment', 'printenv', 'getenv'].includes(word));
}

/** A tool that fails on purpose (`fail`, `throw_error`…), never one that kills its process. */
export function failsOnPurpose(name: string): boolean {
  const words = name.toLowerCase().split(/[^a-z0-9]+/);
  return (
    words.some((word) => ['fail', 'throw', 'error'].includes(word)) &&
    !words.some((word) => ['crash', 'exit', 'kill'].includes(word))
  );
}

/**
 * Arguments naming `secret` to a tool: its string argument that names a variable (`name`, `key`,
 * `var`, `quoteEnv`…), or its only string argument, set to the secret's name. A tool without one
 * (it prints the whole environment) gets the least arguments its schema accepts.
 */
function argumentsNaming(tool: McpTool, secret: string): Json {
  const base = sampleArguments(tool.inputSchema);
  const properties = (tool.inputSchema.properties ?? {}) as Record<string, { type?: unknown }>;
  const strings = Object.keys(properties).filter((key) => properties[key]?.type === 'string');
  const key =
    strings.find((name) => /name|key|var|env/i.test(name)) ?? (strings.length === 1 ? strings[0] : undefined);
  return key === undefined ? base : { ...base, [key]: secret };
}

/** Everything the gateway answers within a check, headers and bodies, to search for a canary. */
interface Recorded {
  context: DeploymentContext;
  exchanges: { request: HttpRequest; response: HttpResponse }[];
}

/** The same context, its HTTP client also keeping every response whole (evidence keeps excerpts, redacted). */
function recording(context: DeploymentContext): Recorded {
  const exchanges: Recorded['exchanges'] = [];
  const inner = context.http;
  const http = Object.create(inner) as HttpClient;
  http.request = async (request) => {
    const response = await inner.request(request);
    exchanges.push({ request, response });
    return response;
  };
  return { context: { ...context, http }, exchanges };
}

/** Which responses contain `value` (in a header or the body), as "METHOD path → status". */
function responsesContaining(recorded: Recorded, value: string): string[] {
  return recorded.exchanges
    .filter(({ response }) =>
      [response.text, ...[...response.headers.entries()].flat()].some((text) => text.includes(value)),
    )
    .map(({ request, response }) => `${request.method ?? 'GET'} ${request.path} → HTTP ${response.status}`);
}

const storeSecret = (context: DeploymentContext, serverId: string, token: string, secrets: Json) =>
  context.http.request({
    service: 'gateway',
    method: 'POST',
    path: secretsPath(serverId),
    headers: bearer(token),
    json: { secrets },
  });

const deleteSecrets = (context: DeploymentContext, serverId: string, token?: string) =>
  context.http.request({
    service: 'gateway',
    method: 'DELETE',
    path: secretsPath(serverId),
    headers: token === undefined ? {} : bearer(token),
  });

/** GET /api/secrets/:serverId as `token`; the names it lists as stored. */
async function listStored(
  context: DeploymentContext,
  serverId: string,
  token: string,
  what: string,
): Promise<string[]> {
  const response = await context.http.request({
    service: 'gateway',
    path: secretsPath(serverId),
    headers: bearer(token),
  });
  expectStatus(response, 200, `GET ${secretsPath(serverId)} ${what}`);
  const names = storedNames(response.body);
  if (names === undefined) {
    failWith(
      `GET ${secretsPath(serverId)} ${what}: no list of stored names the runner can read (an array, or "names" or "secrets"): ${excerpt(response.text, 200)}`,
    );
  }
  return names;
}

function expectStored(response: HttpResponse, serverId: string, what: string): void {
  ensure(
    response.status >= 200 && response.status < 300,
    `POST ${secretsPath(serverId)} ${what}: expected HTTP 2xx, got ${response.status}: ${excerpt(response.text, 200)}`,
  );
}

/** The first listed server that declares a secret, or not applicable. */
async function serverDeclaringSecret(
  context: DeploymentContext,
): Promise<{ view: ServerView; name: string }> {
  const views: ServerView[] = [];
  for (const id of await listServerIds(context)) views.push(await readServer(context, id));
  const view = views.find((candidate) => declaredSecrets(candidate).length > 0);
  if (view === undefined) {
    notApplicableBecause(
      `no MCP server declares a secret, and only declared names can be stored (${views.map((v) => `${v.id} declares none`).join(', ') || 'no servers listed'})`,
    );
  }
  return { view, name: declaredSecrets(view)[0] as string };
}

/** What the secret-injection checks need: a servable server that declares a secret and can echo it. */
interface SecretEcho {
  serverId: string;
  secret: string;
  envTool: McpTool;
  failTool: McpTool | undefined;
}

async function secretEchoServer(context: DeploymentContext): Promise<SecretEcho> {
  const server = await findServableServer(context, {
    needSmokeTool: false,
    where: {
      wanted: 'declares a secret and serves a tool that reads the environment (env, get-env…)',
      unfit: (view) => {
        if (declaredSecrets(view).length === 0) return 'declares no secret';
        const tools = view.details.tools;
        const names = Array.isArray(tools)
          ? tools.flatMap((tool) => (isObject(tool) && typeof tool.name === 'string' ? [tool.name] : []))
          : [];
        // A server's details may not list its tools (or not yet): then its tools are asked for.
        return names.length > 0 && !names.some(readsEnvironment)
          ? `declares ${declaredSecrets(view).join(', ')} but serves no tool that reads the environment`
          : undefined;
      },
    },
  });
  const envTool = server.tools.find((tool) => readsEnvironment(tool.name));
  if (envTool === undefined) {
    notApplicableBecause(
      `${server.view.id} declares ${declaredSecrets(server.view).join(', ')} but serves no tool that reads the environment (${server.tools.map((tool) => tool.name).join(', ')})`,
    );
  }
  return {
    serverId: server.view.id,
    secret: declaredSecrets(server.view)[0] as string,
    envTool,
    failTool: server.tools.find((tool) => failsOnPurpose(tool.name)),
  };
}

/** The names of injected secrets a proof lists, or a failure. */
function secretNamesOf(proof: Json, where: string): string[] {
  const found = findField(proof, 'secretNames');
  if (!Array.isArray(found?.value)) failWith(`the proof of ${where} lists no names of injected secrets`);
  return found.value.filter((name): name is string => typeof name === 'string');
}

const contentOf = (result: Json): string => JSON.stringify(result.content ?? null);

export const secretsRequirements: readonly Requirement[] = [
  {
    id: 'GW-5.secrets-wallet-only',
    level: 'MUST',
    title: 'GET, POST and DELETE /api/secrets/:serverId refuse an anonymous request with 401',
    spec: `${SPEC_SECRETS_API}; secrets belong to a wallet, so there are none without one`,
    service: 'gateway',
    check: async (context) => {
      const ids = await listServerIds(context);
      if (ids.length === 0) notApplicableBecause('GET /api/servers lists no MCP servers');
      let serverId = ids[0] as string;
      let name = 'SIGIL_CONFORMANCE';
      for (const id of ids) {
        const declared = declaredSecrets(await readServer(context, id));
        if (declared.length > 0) {
          [serverId, name] = [id, declared[0] as string];
          break;
        }
      }
      // The positive control: a signed-in wallet is answered, so a 401 below is about being anonymous.
      const { token } = await signIn(context, GATEWAY_AUTH);
      await listStored(context, serverId, token, 'as a signed-in wallet');
      const route = secretsPath(serverId);
      expectStatus(
        await context.http.request({ service: 'gateway', path: route }),
        401,
        `anonymous GET ${route}`,
      );
      expectStatus(
        await context.http.request({
          service: 'gateway',
          method: 'POST',
          path: route,
          json: { secrets: { [name]: canary(context) } },
        }),
        401,
        `anonymous POST ${route}`,
      );
      expectStatus(await deleteSecrets(context, serverId), 401, `anonymous DELETE ${route}`);
      return pass();
    },
  },
  {
    id: 'GW-4.secrets-api',
    level: 'MUST',
    title:
      'A wallet stores a secret with POST /api/secrets/:serverId; GET lists its name, never its value; another wallet neither sees nor deletes it; DELETE removes it',
    spec: `${SPEC_SECRETS_API}; part 2, secret handling rules (per-user keys, a distinct key per wallet per server)`,
    service: 'gateway',
    check: async (context) => {
      const recorded = recording(context);
      const ctx = recorded.context;
      const { view, name } = await serverDeclaringSecret(ctx);
      const serverId = view.id;
      const value = canary(ctx);
      const owner = await signIn(ctx, GATEWAY_AUTH);
      const other = await signIn(ctx, GATEWAY_AUTH);
      ensure(
        !(await listStored(ctx, serverId, owner.token, 'as a new wallet')).includes(name),
        `GET ${secretsPath(serverId)} lists ${name} as stored for a wallet that never stored a secret`,
      );
      expectStored(await storeSecret(ctx, serverId, owner.token, { [name]: value }), serverId, `of ${name}`);
      let deleted = false;
      try {
        ensure(
          (await listStored(ctx, serverId, owner.token, 'after POST')).includes(name),
          `GET ${secretsPath(serverId)} does not list ${name} after the wallet stored it`,
        );
        ensure(
          !(await listStored(ctx, serverId, other.token, 'as another wallet')).includes(name),
          `GET ${secretsPath(serverId)} as another wallet lists ${name}, which only the first wallet stored`,
        );
        const foreign = await deleteSecrets(ctx, serverId, other.token);
        ensure(
          foreign.status < 500,
          `DELETE ${secretsPath(serverId)} as a wallet with no secrets: HTTP ${foreign.status}, a server error`,
        );
        ensure(
          (await listStored(ctx, serverId, owner.token, 'after another wallet’s DELETE')).includes(name),
          `DELETE ${secretsPath(serverId)} as another wallet removed ${name} of the first wallet`,
        );
        const removal = await deleteSecrets(ctx, serverId, owner.token);
        ensure(
          removal.status >= 200 && removal.status < 300,
          `DELETE ${secretsPath(serverId)}: expected HTTP 2xx, got ${removal.status}: ${excerpt(removal.text, 200)}`,
        );
        deleted = true;
        ensure(
          !(await listStored(ctx, serverId, owner.token, 'after DELETE')).includes(name),
          `GET ${secretsPath(serverId)} still lists ${name} after DELETE`,
        );
      } finally {
        if (!deleted) await deleteSecrets(ctx, serverId, owner.token).catch(() => undefined);
      }
      const leaks = responsesContaining(recorded, value);
      ensure(leaks.length === 0, `the secret's value came back in ${leaks.join(', ')}`);
      return pass();
    },
  },
  {
    id: 'GW-7.secret-redaction',
    level: 'MUST',
    title:
      'A wallet’s secret value never comes back: not in the result of a tool that echoes it, the error of a failing call, the proof, or any response; the proof names the secret',
    spec: `gateway spec part 7: "Secrets are redacted from all error paths"; ${SPEC_SECRET}; part 8: "Secrets are injected as environment variables"`,
    service: 'gateway',
    check: async (context) => {
      const recorded = recording(context);
      const ctx = recorded.context;
      const { serverId, secret, envTool, failTool } = await secretEchoServer(ctx);
      const value = canary(ctx);
      const owner = await signIn(ctx, GATEWAY_AUTH);
      expectStored(
        await storeSecret(ctx, serverId, owner.token, { [secret]: value }),
        serverId,
        `of ${secret}`,
      );
      try {
        const connection = await McpConnection.open(
          ctx,
          `/mcp/server/${encodeURIComponent(serverId)}`,
          bearer(owner.token),
        );
        const echoed = await callKeepingMeta(connection, envTool.name, argumentsNaming(envTool, secret));
        const names = secretNamesOf(findProof(echoed.result, `the result of ${echoed.where}`), echoed.where);
        ensure(
          names.includes(secret),
          `the proof of ${echoed.where}, called by the wallet that stored ${secret}, does not name it among the injected secrets (${names.join(', ') || 'none'})`,
        );
        context.evidence.note(`${envTool.name} answered the owner`, {
          text: excerpt(textOf(echoed.result as CallToolResult), 300),
        });
        if (failTool) {
          const failed = await callKeepingMeta(connection, failTool.name, argumentsNaming(failTool, secret));
          context.evidence.note(
            `${failTool.name} answered ${failed.result.isError === true ? 'a tool error' : 'a result'}`,
            {
              text: excerpt(textOf(failed.result as CallToolResult), 300),
            },
          );
        } else {
          context.evidence.note(
            `${serverId} serves no tool that fails on purpose (fail, throw, error): the error of a failing call is not exercised`,
          );
        }
        const overRest = await callOverRest(
          ctx,
          serverId,
          envTool.name,
          argumentsNaming(envTool, secret),
          bearer(owner.token),
        );
        findProof(overRest.result, `the result of ${overRest.where}`);
        await listStored(ctx, serverId, owner.token, 'after the calls');
      } finally {
        await deleteSecrets(ctx, serverId, owner.token).catch(() => undefined);
      }
      const leaks = responsesContaining(recorded, value);
      ensure(leaks.length === 0, `the secret's value came back in ${leaks.join(', ')}`);
      return pass();
    },
  },
  {
    id: 'GW-2.secret-per-wallet',
    level: 'MUST',
    title:
      'A wallet’s secret reaches only its own server process: the same tool called by another wallet does not see it, and its proof does not name it',
    spec: `${SPEC_SECRET}; part 2, secret handling rules ("a distinct key per wallet per server"); part 8: "Secrets are injected as environment variables"`,
    service: 'gateway',
    check: async (context) => {
      const recorded = recording(context);
      const ctx = recorded.context;
      const { serverId, secret, envTool } = await secretEchoServer(ctx);
      const value = canary(ctx);
      const owner = await signIn(ctx, GATEWAY_AUTH);
      const other = await signIn(ctx, GATEWAY_AUTH);
      const endpoint = `/mcp/server/${encodeURIComponent(serverId)}`;
      const args = argumentsNaming(envTool, secret);
      expectStored(
        await storeSecret(ctx, serverId, owner.token, { [secret]: value }),
        serverId,
        `of ${secret}`,
      );
      try {
        const own = await callKeepingMeta(
          await McpConnection.open(ctx, endpoint, bearer(owner.token)),
          envTool.name,
          args,
        );
        const theirs = await callKeepingMeta(
          await McpConnection.open(ctx, endpoint, bearer(other.token)),
          envTool.name,
          args,
        );
        // The positive control: the owner's process sees the secret, so the other's not seeing it means something.
        ensure(
          secretNamesOf(findProof(own.result, own.where), own.where).includes(secret),
          `the proof of the owner's call names no injected ${secret}: the secret did not reach the owner's process, so its absence elsewhere proves nothing`,
        );
        const named = secretNamesOf(findProof(theirs.result, theirs.where), theirs.where);
        ensure(
          !named.includes(secret),
          `the proof of another wallet's call of ${envTool.name} names ${secret}, which only the first wallet stored: it was injected into the other wallet's process`,
        );
        ensure(
          !JSON.stringify(theirs.result).includes(value),
          `another wallet's call of ${envTool.name} answered the first wallet's secret value`,
        );
        ensure(
          contentOf(own.result) !== contentOf(theirs.result),
          `${envTool.name} answers the wallet that stored ${secret} exactly as a wallet without it (${excerpt(textOf(theirs.result as CallToolResult), 200)}): the server never saw the secret`,
        );
      } finally {
        await deleteSecrets(ctx, serverId, owner.token).catch(() => undefined);
      }
      const leaks = responsesContaining(recorded, value);
      ensure(leaks.length === 0, `the secret's value came back in ${leaks.join(', ')}`);
      return pass();
    },
  },
];
