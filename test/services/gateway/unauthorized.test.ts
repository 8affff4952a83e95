import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { expect } from 'chai';
import { serve, type Serving } from '../../../services/serve.ts';
import { openTestKernel } from '../../support/kernel.ts';
import { postMcp, walletToken } from './support.ts';

const REDIRECT = 'http://127.0.0.1:1/callback';

/**
 * A desktop MCP client holding a wallet token, as `mcp-remote` is: it sends the token it has and, on a
 * 401, runs the SDK's OAuth discovery; it opens no browser (the authorization URL is only recorded).
 */
class DesktopClientAuth implements OAuthClientProvider {
  authorizationUrl: URL | undefined;
  constructor(private readonly token: string) {}
  get redirectUrl() {
    return REDIRECT;
  }
  get clientMetadata() {
    return { redirect_uris: [REDIRECT], client_name: 'sigil-test-desktop' };
  }
  clientInformation() {
    return { client_id: 'sigil-test-desktop' };
  }
  tokens() {
    return { access_token: this.token, token_type: 'Bearer' };
  }
  saveTokens() {}
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier() {}
  codeVerifier() {
    return 'verifier';
  }
}

interface Exchange {
  method: string;
  url: string;
  status: number;
  wwwAuthenticate: string | null;
  body: string;
}

/** Every request the client makes, with its answer. */
function recordingFetch(exchanges: Exchange[]): FetchLike {
  return async (url, init) => {
    const res = await fetch(url, init);
    exchanges.push({
      method: init?.method ?? 'GET',
      url: String(url),
      status: res.status,
      wwwAuthenticate: res.headers.get('www-authenticate'),
      body: await res.clone().text(),
    });
    return res;
  };
}

/** The parameters of a `Bearer` challenge. */
function challengeParams(header: string | null): Record<string, string> {
  expect(header).to.match(/^Bearer /);
  return Object.fromEntries(
    [...(header as string).matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1] as string, m[2] as string]),
  );
}

/**
 * A bad or revoked token sent by an MCP client gets a 401 whose WWW-Authenticate names the gateway's
 * protected-resource metadata and says the token was refused, and why (RFC 6750, RFC 9728, the MCP
 * authorization spec); it used to be a bare 401, after which `mcp-remote` found no metadata (404) and
 * fell back to an SSE GET (405), showing neither the reason nor how to get a token.
 */
describe('gateway: a refused token is a 401 with WWW-Authenticate and protected-resource metadata', function () {
  this.timeout(30_000);
  let serving: Serving;
  let url: string;

  before(async () => {
    const kernel = await openTestKernel({
      config: { gateway: { port: 0 }, plugins: [{ resolve: 'tee-none', enabled: true, options: {} }] },
    });
    serving = await serve(kernel, ['gateway']);
    url = serving.urls.gateway as string;
  });
  after(() => serving.stop());

  /** A wallet token that worked, then revoked by its wallet. */
  async function revokedToken(): Promise<string> {
    const { token, id, jwt } = await walletToken(url);
    const ok = new Client({ name: 'ok', version: '1' });
    await ok.connect(
      new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      }),
    );
    await ok.close();
    const revoked = await fetch(`${url}/api/auth/tokens/${id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${jwt}` },
    });
    expect(revoked.status).to.equal(204);
    return token;
  }

  it('the official SDK client, with its OAuth flow, fails Unauthorized on the 401 and reads the metadata it names', async () => {
    const token = await revokedToken();
    const exchanges: Exchange[] = [];
    const auth = new DesktopClientAuth(token);
    const client = new Client({ name: 'desktop', version: '1' });
    const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
      authProvider: auth,
      fetch: recordingFetch(exchanges),
    });
    let failure: unknown;
    await client.connect(transport).catch((err: unknown) => (failure = err));
    expect(failure).to.be.instanceOf(UnauthorizedError);

    const [first, second] = exchanges;
    expect(first).to.include({ method: 'POST', url: `${url}/mcp`, status: 401 });
    const challenge = challengeParams(first?.wwwAuthenticate ?? null);
    expect(challenge).to.include({
      resource_metadata: `${url}/.well-known/oauth-protected-resource`,
      error: 'invalid_token',
    });
    expect(challenge.error_description).to.match(/revoked/i);
    expect(JSON.parse(first?.body ?? '{}')).to.include({ code: 'unauthorized' });
    // The client read the document the header named, at once, and found it.
    expect(second).to.include({ method: 'GET', url: challenge.resource_metadata, status: 200 });
    const metadata = JSON.parse(second?.body ?? '{}') as {
      resource: string;
      bearer_methods_supported: string[];
    };
    expect(metadata.resource).to.equal(url);
    // Never the SSE fallback, nor a guess at where the metadata might be.
    for (const exchange of exchanges) {
      expect(exchange.status, `${exchange.method} ${exchange.url}`).not.to.equal(405);
      expect(exchange.url).not.to.equal(`${url}/.well-known/oauth-protected-resource/mcp`);
    }
    expect(exchanges.filter((e) => e.method === 'GET' && e.url === `${url}/mcp`)).to.deep.equal([]);
  });

  it('answers raw requests: the challenge for each refusal, none of error for no credentials, and the metadata document', async () => {
    const post = (headers: Record<string, string>) =>
      postMcp(`${url}/mcp`, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }), headers);
    for (const [authorization, reason] of [
      ['Bearer sigil_wt_0000000000000000000000000000000000000000000', /wallet token/i],
      ['Bearer not.a.jwt', /session token rejected/i],
      ['Basic dXNlcjpwYXNz', /Bearer/],
    ] as const) {
      const res = await post({ authorization });
      expect(res.status, authorization).to.equal(401);
      const challenge = challengeParams(res.headers.get('www-authenticate'));
      expect(challenge.realm).to.equal('sigil-gateway');
      expect(challenge.resource_metadata).to.equal(`${url}/.well-known/oauth-protected-resource`);
      expect(challenge.error, authorization).to.equal('invalid_token');
      expect(challenge.error_description, authorization).to.match(reason);
      expect(challenge.error_description).not.to.match(/["\\]/);
    }
    // Anonymous MCP is served (free tools, x402); a protected route asks for credentials without an error.
    expect((await post({})).status).to.equal(200);
    const session = await fetch(`${url}/api/auth/session`);
    expect(session.status).to.equal(401);
    const challenge = challengeParams(session.headers.get('www-authenticate'));
    expect(challenge).to.deep.equal({
      realm: 'sigil-gateway',
      resource_metadata: `${url}/.well-known/oauth-protected-resource`,
    });

    for (const [path, resource] of [
      ['/.well-known/oauth-protected-resource', url],
      ['/.well-known/oauth-protected-resource/mcp', `${url}/mcp`],
    ]) {
      const res = await fetch(`${url}${path}`);
      expect(res.status, path).to.equal(200);
      const document = (await res.json()) as Record<string, unknown> & {
        wallet_tokens: Record<string, string>;
      };
      expect(document.resource, path).to.equal(resource);
      expect(document.bearer_methods_supported).to.deep.equal(['header']);
      // No runtime URL is configured here, so no authorization server is named.
      expect(document).not.to.have.property('authorization_servers');
      expect(document.wallet_tokens.description).to.include('/api/auth/create-token');
      expect(document.wallet_tokens.token_endpoint).to.equal(`${url}/api/auth/create-token`);
    }
  });

  it('names the runtime as the authorization server when its URL is configured (it issues the delegated JWTs)', async () => {
    const kernel = await openTestKernel({
      config: {
        gateway: {
          port: 0,
          delegation: {
            enabled: true,
            cacheSeconds: 300,
            requireTrusted: false,
            runtimeUrl: 'https://runtime.example',
          },
        },
        plugins: [{ resolve: 'tee-none', enabled: true, options: {} }],
      },
    });
    const withRuntime = await serve(kernel, ['gateway']);
    try {
      const res = await fetch(`${withRuntime.urls.gateway}/.well-known/oauth-protected-resource`);
      expect(((await res.json()) as { authorization_servers: string[] }).authorization_servers).to.deep.equal(
        ['https://runtime.example'],
      );
    } finally {
      await withRuntime.stop();
    }
  });
});
