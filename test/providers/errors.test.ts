import { expect } from 'chai';
import {
  llmErrorKindForStatus,
  llmProviderError,
  LlmProviderError,
  retryAfterMs,
  scrubSecret,
} from '@sigil/plugin-api';

describe('LlmProviderError (@sigil/plugin-api)', () => {
  it('types HTTP statuses: 401/403 auth, 429 rate_limit, 400/404/413/422 bad_request, the rest upstream', () => {
    const table = Object.fromEntries(
      [400, 401, 403, 404, 409, 413, 422, 429, 500, 502, 503, 529, undefined].map((status) => [
        String(status),
        llmErrorKindForStatus(status),
      ]),
    );
    expect(table).to.deep.equal({
      '400': 'bad_request',
      '401': 'auth',
      '403': 'auth',
      '404': 'bad_request',
      '409': 'upstream',
      '413': 'bad_request',
      '422': 'bad_request',
      '429': 'rate_limit',
      '500': 'upstream',
      '502': 'upstream',
      '503': 'upstream',
      '529': 'upstream',
      undefined: 'upstream',
    });
  });

  it('is retryable for rate_limit and upstream only', () => {
    const retryable = (['auth', 'rate_limit', 'bad_request', 'upstream'] as const).map(
      (kind) => new LlmProviderError(kind, 'x').retryable,
    );
    expect(retryable).to.deep.equal([false, true, false, true]);
  });

  it('takes the key out of what the upstream said, names the provider and the status, and keeps no cause', () => {
    const key = 'sk-live-0123456789abcdef';
    const error = llmProviderError({
      provider: 'acme',
      apiKey: key,
      status: 401,
      message: `Incorrect API key provided: ${key}. Your key ${key} is wrong.`,
      upstreamCode: `invalid_api_key`,
    });
    expect(error.message).to.equal(
      'acme answered 401: Incorrect API key provided: [REDACTED]. Your key [REDACTED] is wrong.',
    );
    expect(error).to.include({
      kind: 'auth',
      status: 401,
      upstreamCode: 'invalid_api_key',
      name: 'LlmProviderError',
    });
    expect(error.cause).to.equal(undefined);
    expect(String(error.stack)).to.not.include(key);
  });

  it('scrubs the key in the forms an upstream may quote it in: JSON-escaped, URL-encoded, in Basic auth’s base64', () => {
    const key = 'sk-test"key/with+specials';
    const quoted = `{"key":${JSON.stringify(key)}} ${encodeURIComponent(key)} Basic ${Buffer.from(`user:${key}`).toString('base64')}`;
    const scrubbed = scrubSecret(quoted, key);
    expect(scrubbed.match(/\[REDACTED\]/g)).to.have.length(3);
    expect(scrubbed).not.to.include('specials');
  });

  it('cuts a long upstream message', () => {
    expect(scrubSecret('x'.repeat(600), 'k')).to.have.length(501);
  });

  it('reads retry-after-ms, retry-after in seconds, and retry-after as an HTTP date', () => {
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '250' }))).to.equal(250);
    expect(retryAfterMs(new Headers({ 'retry-after': '2' }))).to.equal(2000);
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs(new Headers({ 'retry-after': 'Thu, 01 Jan 2026 00:00:05 GMT' }), now)).to.equal(5000);
    expect(retryAfterMs(new Headers({ 'retry-after': 'soon' }))).to.equal(undefined);
    expect(retryAfterMs(undefined)).to.equal(undefined);
  });
});
