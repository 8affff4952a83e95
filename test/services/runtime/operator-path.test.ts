import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { isSigilError } from '@sigil/plugin-api';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { operatorFetch } from '../../../services/runtime/gateway-client.ts';
import { describeEachDatabase } from '../../support/kernel.ts';
import { errorOf, newWallet } from '../../core/auth/support.ts';
import { GATEWAY_PUBLIC, Stack } from './support.ts';

describeEachDatabase('operator path: ERC-8128 signed gateway requests from the runtime', (database) => {
  const operatorKey = generatePrivateKey();
  const operator = privateKeyToAccount(operatorKey);
  let stack: Stack;
  before(async () => {
    stack = await Stack.start({
      database,
      config: {
        runtime: { operatorKey },
        gateway: { operatorWallets: [operator.address], erc8128EnforceOperatorMcp: true },
      },
    });
  });
  after(() => stack?.close());

  /** Requests to the stack's gateway signed by `signer` as the runtime signs them, sent through `send`. */
  const signedFor = (signer: PrivateKeyAccount, send?: FetchLike) =>
    operatorFetch({
      signer,
      chainId: 8453,
      clock: stack.clock,
      signFor: GATEWAY_PUBLIC,
      ...(send ? { fetch: send } : {}),
    });

  it('signs every request with the operator wallet: the gateway sees an operator, by erc8128', async () => {
    const signed = stack.runtime.gateway.operatorFetch();
    const res = await signed(stack.url('gateway', '/api/auth/session'));
    expect(res.status).to.equal(200);
    expect(await res.json()).to.deep.equal({ address: operator.address, method: 'erc8128', operator: true });
    // Bearer-only requests of the operator are refused here (ERC8128_ENFORCE_OPERATOR_MCP).
    const jwt = await stack.signIn(operator, 'gateway');
    const error = await errorOf(await stack.get('gateway', '/api/auth/session', jwt));
    expect(error).to.include({ status: 401 });
  });

  it('drives the official MCP SDK client over /mcp with the runtime’s operator transport', async () => {
    const client = new Client({ name: 'sigil-runtime', version: '1.0.0' });
    await client.connect(await stack.runtime.gateway.operatorTransport());
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).to.include.members([
      'gateway_search_servers',
      'gateway_list_enabled',
    ]);
    const result = await client.callTool({ name: 'gateway_list_enabled', arguments: {} });
    expect(result.isError ?? false).to.equal(false);
    await client.close();
  });

  it('signs each request afresh (a nonce each), so a captured one replayed is refused', async () => {
    const sent: { url: string; init: RequestInit }[] = [];
    const signed = signedFor(operator, (url, init) => {
      sent.push({ url: String(url), init: init ?? {} });
      return fetch(url, init);
    });
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
    const init = {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body,
    };
    expect((await signed(stack.url('gateway', '/mcp'), init)).status).to.equal(200);
    expect((await signed(stack.url('gateway', '/mcp'), init)).status).to.equal(200);
    const [first, second] = sent as [{ url: string; init: RequestInit }, { url: string; init: RequestInit }];
    const signatureOf = (request: { init: RequestInit }) =>
      new Headers(request.init.headers).get('signature');
    expect(signatureOf(first)).to.not.equal(signatureOf(second));
    const replay = await errorOf(await fetch(first.url, first.init));
    expect(replay).to.include({ status: 401 });
    expect(replay.message).to.match(/nonce has already been used/);
  });

  it('acts for a wallet named in X-Sigil-On-Behalf-Of, covered by the operator’s signature: the gateway sees that wallet', async () => {
    const wallet = newWallet();
    const signed = signedFor(operator);
    const res = await signed(stack.url('gateway', '/api/auth/session'), {
      headers: { 'x-sigil-on-behalf-of': wallet.address },
    });
    expect(res.status).to.equal(200);
    expect(await res.json()).to.deep.equal({
      address: wallet.address,
      method: 'operator-on-behalf',
      operator: false,
      actingOperator: operator.address,
    });
  });

  it('refuses X-Sigil-On-Behalf-Of from an ordinary wallet, unsigned, or outside the signature, and at the runtime: 403, nothing changed', async () => {
    const victim = newWallet();
    const mallory = newWallet();
    const enable = {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'x-sigil-on-behalf-of': victim.address,
        'x-mcp-session': 'shared',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'gateway_enable_server', arguments: { serverId: 'everything' } },
      }),
    };
    const asMallory = signedFor(mallory);
    const ordinary = await errorOf(await asMallory(stack.url('gateway', '/mcp'), enable));
    expect(ordinary).to.include({ status: 403, code: 'forbidden' });
    expect(ordinary.message).to.include('not an operator wallet');

    // The header added after the operator signed: the signature does not cover it.
    const signedWithout = signedFor(operator, (url, init) => {
      const headers = new Headers(init?.headers);
      headers.set('x-sigil-on-behalf-of', victim.address);
      return fetch(url, { ...init, headers });
    });
    const { 'x-sigil-on-behalf-of': _named, ...unnamed } = enable.headers;
    const outside = await errorOf(
      await signedWithout(stack.url('gateway', '/mcp'), { ...enable, headers: unnamed }),
    );
    expect(outside).to.include({ status: 403, code: 'forbidden' });
    expect(outside.message).to.include('does not cover');

    const bearer = await stack.signIn(mallory, 'gateway');
    const unsigned = await errorOf(
      await stack.fetch('gateway', '/mcp', {
        ...enable,
        headers: { ...enable.headers, authorization: `Bearer ${bearer}` },
      }),
    );
    expect(unsigned).to.include({ status: 403, code: 'forbidden' });

    const atRuntime = await errorOf(
      await stack.fetch('runtime', '/auth/session', {
        headers: {
          authorization: `Bearer ${await stack.signIn(mallory)}`,
          'x-sigil-on-behalf-of': victim.address,
        },
      }),
    );
    expect(atRuntime).to.include({ status: 403, code: 'forbidden' });

    // Nothing was enabled for the victim in that session.
    const asVictim = signedFor(operator);
    const listed = await asVictim(stack.url('gateway', '/mcp'), {
      ...enable,
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'gateway_list_enabled', arguments: {} },
      }),
    });
    const answer = (await listed.json()) as { result: { structuredContent: { enabled: string[] } } };
    expect(answer.result.structuredContent.enabled).to.deep.equal([]);
  });

  it('has no operator path without runtime.operatorKey', async () => {
    const plain = await Stack.start({ database });
    try {
      let failure: unknown;
      try {
        await plain.runtime.gateway.operatorTransport();
      } catch (err) {
        failure = err;
      }
      expect(isSigilError(failure) && failure.code).to.equal('unavailable');
      expect(String((failure as Error & { hint?: string }).hint)).to.include('RUNTIME_OPERATOR_KEY');
    } finally {
      await plain.close();
    }
  });
});
