import { expect } from 'chai';
import { describeEachDatabase } from '../../support/kernel.ts';
import { bearerHeader, errorOf, newWallet, Services } from './support.ts';

describeEachDatabase('auth input validation', (database) => {
  let services: Services;
  let jwt: string;
  before(async () => {
    services = await Services.start({ database });
    jwt = await services.signIn('gateway', newWallet());
  });
  after(() => services.close());

  const expectStatus = async (res: Response, status: number, code: string) => {
    const error = await errorOf(res);
    expect(error, error.message).to.include({ status, code });
  };
  const post = (path: string, body: string, type: string, bearer?: string) =>
    services.fetch('gateway', path, {
      method: 'POST',
      headers: { 'content-type': type, ...(bearer === undefined ? {} : bearerHeader(bearer)) },
      body,
    });

  it('challenge: a missing, malformed or repeated address is a 400', async () => {
    for (const query of ['', '?address=', '?address=0x123', `?address=${'0x' + 'g'.repeat(40)}`]) {
      await expectStatus(
        await services.get('gateway', `/api/auth/challenge${query}`),
        400,
        'invalid_request',
      );
    }
    const address = newWallet().address;
    await expectStatus(
      await services.get('runtime', `/auth/challenge?address=${address}&address=${address}`),
      400,
      'invalid_request',
    );
  });

  it('verify: missing fields, bad types, non-JSON and malformed JSON are 400s; an oversized body is 413', async () => {
    const wallet = newWallet();
    const { message } = await services.challenge('gateway', wallet.address);
    const signature = await wallet.signMessage({ message });
    for (const body of [
      {},
      { message },
      { signature },
      { message, signature: 'nothex' },
      { message: 42, signature },
      { message, signature, extra: true },
      [],
    ]) {
      await expectStatus(
        await services.postJson('gateway', '/api/auth/verify', body),
        400,
        'invalid_request',
      );
    }
    await expectStatus(
      await post('/api/auth/verify', '{"message":', 'application/json'),
      400,
      'invalid_request',
    );
    await expectStatus(await post('/api/auth/verify', 'message=x', 'text/plain'), 400, 'invalid_request');
    await expectStatus(
      await services.fetch('gateway', '/api/auth/verify', { method: 'POST' }),
      400,
      'invalid_request',
    );
    const huge = JSON.stringify({ message: 'x'.repeat(70 * 1024), signature });
    await expectStatus(await post('/api/auth/verify', huge, 'application/json'), 413, 'payload_too_large');
    // None of that consumed the challenge.
    expect((await services.verify('gateway', message, signature)).status).to.equal(200);
  });

  it('create-token and revoke: bad labels, unknown fields and bad ids are 400s', async () => {
    for (const body of [{ label: '' }, { label: 'x'.repeat(101) }, { label: 7 }, { name: 'x' }]) {
      await expectStatus(
        await services.postJson('gateway', '/api/auth/create-token', body, jwt),
        400,
        'invalid_request',
      );
    }
    await expectStatus(
      await services.fetch('gateway', '/api/auth/tokens/not-a-uuid', {
        method: 'DELETE',
        headers: bearerHeader(jwt),
      }),
      400,
      'invalid_request',
    );
  });

  it('an oversized signed non-JSON body is a 413', async () => {
    const { response } = await services.signed('gateway', newWallet(), '/api/auth/create-token', {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body: 'x'.repeat(70 * 1024),
    });
    await expectStatus(response, 413, 'payload_too_large');
  });

  it('malformed Authorization headers are 401s on protected routes and ignored on public ones', async () => {
    for (const authorization of ['Basic dXNlcjpwYXNz', 'Bearer', 'Bearer a b', 'token']) {
      await expectStatus(
        await services.fetch('gateway', '/api/auth/session', { headers: { authorization } }),
        401,
        'unauthorized',
      );
    }
    const challenge = await services.fetch('gateway', `/api/auth/challenge?address=${newWallet().address}`, {
      headers: bearerHeader('expired.or.garbage'),
    });
    expect(challenge.status).to.equal(200);
  });
});
