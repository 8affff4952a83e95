import { expect } from 'chai';
import { EvidenceRedactor, isSecretName, redactSecrets, redactValue } from '@sigil/plugin-api/kit';
import { leakedIn, makeCanaries, type Canaries } from './canaries.ts';

describe('conformance redaction', () => {
  let canaries: Canaries;
  before(async () => {
    canaries = await makeCanaries();
  });

  it('removes every credential recognisable by its shape from free text', () => {
    const text = [
      `private key ${canaries.privateKey}`,
      `signature ${canaries.walletSignature}`,
      `session ${canaries.jwt}`,
      `wallet token ${canaries.walletToken}`,
      `Authorization: Bearer ${canaries.opaqueBearer}`,
      `Signature: eth=:${canaries.httpSignature}:`,
      canaries.pemPrivateKey,
      `GET /x?token=${canaries.opaqueBearer}&a=1`,
    ].join('\n');
    const redacted = redactSecrets(text);
    expect(leakedIn(redacted, { ...canaries, bareHexKey: 'not planted' })).to.deep.equal([]);
    expect(redacted).to.include('sigil_wt_[REDACTED]');
  });

  it('removes known secret values whatever their shape', () => {
    const redacted = redactSecrets(`operator key ${canaries.bareHexKey}`, [canaries.bareHexKey]);
    expect(redacted).to.equal('operator key [REDACTED]');
  });

  it('remembers a 0x key with and without its prefix', () => {
    const redactor = new EvidenceRedactor();
    redactor.remember(canaries.privateKey);
    expect(redactor.redact(`bare ${canaries.privateKey.slice(2)}`)).to.equal('bare [REDACTED]');
  });

  it('blanks secret-named fields of structured values, at any depth', () => {
    const value = {
      token: 'short-opaque',
      tokenType: 'Bearer',
      nested: [{ walletToken: 'x1234567', privateKey: 'k1234567', api_key: 'a1234567', signature: 'sig' }],
      headers: { authorization: 'Basic abc', 'x-api-key': 'k' },
    };
    expect(redactValue(value)).to.deep.equal({
      token: '[REDACTED]',
      tokenType: 'Bearer',
      nested: [
        {
          walletToken: '[REDACTED]',
          privateKey: '[REDACTED]',
          api_key: '[REDACTED]',
          signature: '[REDACTED]',
        },
      ],
      headers: { authorization: '[REDACTED]', 'x-api-key': '[REDACTED]' },
    });
  });

  it('keeps what a reader needs: addresses, times, prefixes and prose about credentials', () => {
    const text =
      'wallet 0x9588409515672EBD0A9a0b0Fb368fb34C61f469f signed at 2026-11-22T20:34:00.013Z; ' +
      'a bearer token starts "sigil_wt_"; the Bearer JWT of wallet A; tokenType Bearer';
    expect(redactSecrets(text)).to.equal(text);
  });

  it('tells secret field names from look-alikes', () => {
    for (const name of [
      'token',
      'accessToken',
      'refresh_token',
      'signature',
      'privateKey',
      'X-API-Key',
      'cookie',
    ])
      expect(isSecretName(name), name).to.equal(true);
    for (const name of ['tokenType', 'prefix', 'expiresIn', 'signature-input', 'delegatedGatewayJwt'])
      expect(isSecretName(name), name).to.equal(false);
  });
});
