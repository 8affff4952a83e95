import { z } from 'zod';
import { ensure, expectShape, failWith, pass } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectStatus } from './expect.ts';
import { createWalletToken } from './gateway-auth.ts';
import { expectResult, initializeRequest, postMcp } from './mcp.ts';
import { bearer } from './wallet.ts';

/**
 * The gateway's MCP endpoint at its HTTP edge: DNS rebinding (a page whose name resolves to the
 * gateway sends that name as Host and its own site as Origin), CORS for browsers it allows, and the
 * 401 an MCP client gets for a refused token, which must tell it where the protected-resource
 * metadata is, so it shows the reason instead of wandering into an OAuth flow.
 */

const MCP = '/mcp';
const SPEC_REBINDING =
  'MCP transports (2025-11-25), Streamable HTTP, security warning: "Servers MUST validate the Origin header on all incoming connections to prevent DNS rebinding attacks. If the Origin header is present and invalid, servers MUST respond with HTTP 403 Forbidden"';
const SPEC_AUTHORIZATION =
  'MCP authorization (2025-11-25): "MCP servers MUST use the HTTP header WWW-Authenticate when returning a 401 Unauthorized to indicate the location of the resource server metadata URL"; RFC 6750 section 3.1; gateway spec part 5 (wallet tokens)';
/** A name and a site nobody owns (RFC 6761), as a rebinding page would send them. */
const REBINDING_NAME = 'conformance-rebinding.invalid';
const HOSTILE_ORIGIN = `https://${REBINDING_NAME}`;
const MCP_HEADERS = { accept: 'application/json, text/event-stream' };
/** What MCP clients in a browser send beside the body. */
const CLIENT_HEADERS = ['content-type', 'authorization', 'mcp-protocol-version'];

const protectedResourceSchema = z
  .object({
    resource: z.url(),
    authorization_servers: z.array(z.url()).optional(),
    bearer_methods_supported: z.array(z.string()).optional(),
  })
  .loose();

/** The gateway's answer must carry no MCP result: a refused request runs nothing. */
function expectNoResult(response: HttpResponse, what: string): void {
  const body = response.body as { result?: unknown } | undefined;
  ensure(body?.result === undefined, `${what} was refused, yet its body carries an MCP result`);
}

/** The initialize that must work before a refusal means anything. */
async function expectMcpServes(context: DeploymentContext, headers: Record<string, string>, what: string) {
  expectResult(await postMcp(context, MCP, initializeRequest(1), headers), what);
}

/** The parameters of a `Bearer` challenge (RFC 6750 section 3), or a failure naming what is wrong. */
function bearerChallenge(response: HttpResponse, what: string): Record<string, string> {
  const header = response.headers.get('www-authenticate');
  if (header === null) failWith(`${what}: the 401 has no WWW-Authenticate header`);
  ensure(/^Bearer(\s|$)/i.test(header), `${what}: WWW-Authenticate is not a Bearer challenge: ${header}`);
  return Object.fromEntries(
    [...header.matchAll(/([\w-]+)="([^"]*)"/g)].map((m) => [(m[1] as string).toLowerCase(), m[2] as string]),
  );
}

/** A token the gateway issued, one character changed: credentials it must refuse as invalid. */
async function refusedToken(context: DeploymentContext): Promise<string> {
  const { token } = await createWalletToken(context);
  await expectMcpServes(context, bearer(token), 'initialize with a fresh wallet token');
  const last = token.at(-1) === 'A' ? 'B' : 'A';
  return `${token.slice(0, -1)}${last}`;
}

export const edgeRequirements: readonly Requirement[] = [
  {
    id: 'GW-4.mcp-host-refused',
    level: 'MUST',
    title:
      'POST /mcp with a Host the gateway does not answer for is refused (400, 403 or 421), running nothing',
    spec: `${SPEC_REBINDING}; after a rebinding, a page's requests to its own name are same-origin and may carry no Origin, so only the Host names the attack`,
    service: 'gateway',
    check: async (context) => {
      await expectMcpServes(context, {}, 'initialize with the gateway’s own Host');
      const port = new URL(context.http.url('gateway', '/')).port;
      for (const host of [REBINDING_NAME, `${REBINDING_NAME}:${port || '80'}`]) {
        const response = await context.http.request({
          service: 'gateway',
          method: 'POST',
          path: MCP,
          host,
          headers: MCP_HEADERS,
          json: initializeRequest(2),
        });
        ensure(
          [400, 403, 421].includes(response.status),
          `POST ${MCP} with Host: ${host} answered ${response.status}, not 400, 403 or 421`,
        );
        expectNoResult(response, `POST ${MCP} with Host: ${host}`);
      }
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-origin-refused',
    level: 'MUST',
    title:
      'POST /mcp from a hostile Origin is refused with 403 and no CORS grant; without Origin it is served',
    spec: SPEC_REBINDING,
    service: 'gateway',
    check: async (context) => {
      await expectMcpServes(context, {}, 'initialize without an Origin (a client that is not a browser)');
      const response = await context.http.request({
        service: 'gateway',
        method: 'POST',
        path: MCP,
        headers: { ...MCP_HEADERS, origin: HOSTILE_ORIGIN },
        json: initializeRequest(2),
      });
      expectStatus(response, 403, `POST ${MCP} with Origin: ${HOSTILE_ORIGIN}`);
      expectNoResult(response, `POST ${MCP} with Origin: ${HOSTILE_ORIGIN}`);
      const granted = response.headers.get('access-control-allow-origin');
      ensure(
        granted !== '*' && granted !== HOSTILE_ORIGIN,
        `the refusal still grants the hostile origin CORS access (Access-Control-Allow-Origin: ${granted})`,
      );
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-cors-preflight',
    level: 'SHOULD',
    title:
      'A preflight of POST /mcp from the gateway’s own origin is allowed, naming POST and the headers MCP clients send',
    spec: `${SPEC_REBINDING}; Fetch standard, CORS protocol (a browser MCP client preflights its POST)`,
    service: 'gateway',
    check: async (context) => {
      const origin = new URL(context.http.url('gateway', '/')).origin;
      const preflight = await context.http.request({
        service: 'gateway',
        method: 'OPTIONS',
        path: MCP,
        headers: {
          origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': CLIENT_HEADERS.join(', '),
        },
      });
      ensure(
        preflight.status >= 200 && preflight.status < 300,
        `the preflight of POST ${MCP} from ${origin} answered ${preflight.status}`,
      );
      const granted = preflight.headers.get('access-control-allow-origin');
      ensure(
        granted === origin || granted === '*',
        `the preflight grants Access-Control-Allow-Origin: ${granted}`,
      );
      const list = (name: string) =>
        (preflight.headers.get(name) ?? '').split(',').map((item) => item.trim().toLowerCase());
      const methods = list('access-control-allow-methods');
      ensure(
        methods.includes('post'),
        `Access-Control-Allow-Methods does not name POST: ${methods.join(', ')}`,
      );
      // `*` does not cover Authorization (Fetch standard): each header must be named.
      const missing = CLIENT_HEADERS.filter((name) => !list('access-control-allow-headers').includes(name));
      ensure(missing.length === 0, `Access-Control-Allow-Headers leaves out ${missing.join(', ')}`);
      const call = await postMcp(context, MCP, initializeRequest(2), { origin });
      expectResult(call, `initialize with Origin: ${origin}`);
      const answered = call.response.headers.get('access-control-allow-origin');
      ensure(
        answered === origin || answered === '*',
        `the POST grants Access-Control-Allow-Origin: ${answered}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-5.invalid-token-401',
    level: 'MUST',
    title:
      'A refused bearer token at /mcp is 401 with a Bearer WWW-Authenticate naming resource_metadata and invalid_token',
    spec: SPEC_AUTHORIZATION,
    service: 'gateway',
    check: async (context) => {
      const token = await refusedToken(context);
      const reply = await postMcp(context, MCP, initializeRequest(2), bearer(token));
      expectStatus(reply.response, 401, `POST ${MCP} with an altered wallet token`);
      const challenge = bearerChallenge(reply.response, `POST ${MCP} with an altered wallet token`);
      ensure(
        challenge.resource_metadata !== undefined && URL.canParse(challenge.resource_metadata),
        `WWW-Authenticate names no resource_metadata URL: ${reply.response.headers.get('www-authenticate')}`,
      );
      ensure(
        challenge.error === 'invalid_token',
        `WWW-Authenticate says error="${challenge.error ?? ''}", not invalid_token, for a token it refused`,
      );
      return pass();
    },
  },
  {
    id: 'GW-5.protected-resource-metadata',
    level: 'MUST',
    title:
      'The resource_metadata of a 401 is RFC 9728 metadata for the gateway, with its resource and bearer in the header',
    spec: `${SPEC_AUTHORIZATION}; RFC 9728 sections 2 and 3.3 (the resource is the identifier the metadata URL was made from)`,
    service: 'gateway',
    check: async (context) => {
      const reply = await postMcp(context, MCP, initializeRequest(2), bearer(await refusedToken(context)));
      expectStatus(reply.response, 401, `POST ${MCP} with an altered wallet token`);
      const named = bearerChallenge(
        reply.response,
        `POST ${MCP} with an altered wallet token`,
      ).resource_metadata;
      if (named === undefined || !URL.canParse(named)) failWith('the 401 names no resource_metadata URL');
      // Read at the address the runner reaches the gateway by, which may differ from its public URL.
      const url = new URL(named);
      const response = await context.http.request({
        service: 'gateway',
        path: `${url.pathname}${url.search}`,
      });
      expectStatus(response, 200, `GET ${url.pathname}`);
      const metadata = expectShape(protectedResourceSchema, response.body, 'the protected-resource metadata');
      const wellKnown = '/.well-known/oauth-protected-resource';
      ensure(url.pathname.startsWith(wellKnown), `resource_metadata ${named} is not under ${wellKnown}`);
      const identifier = `${url.origin}${url.pathname.slice(wellKnown.length)}`;
      ensure(
        metadata.resource.replace(/\/$/, '') === identifier.replace(/\/$/, ''),
        `the metadata's resource ${metadata.resource} is not ${identifier}, the identifier its URL was made from`,
      );
      const resourcePath = new URL(metadata.resource).pathname.replace(/\/$/, '');
      ensure(
        `${MCP}/`.startsWith(`${resourcePath}/`),
        `the metadata's resource ${metadata.resource} does not cover ${MCP}`,
      );
      const methods = metadata.bearer_methods_supported;
      ensure(
        methods === undefined || methods.includes('header'),
        `bearer_methods_supported ${JSON.stringify(methods)} leaves out header, which the gateway's tokens use`,
      );
      return pass();
    },
  },
];
