import { expect } from 'chai';
import { SigilError } from '@sigil/plugin-api';
import { gatewayAuth } from '../../../services/gateway/auth.ts';
import { openTestKernel } from '../../support/kernel.ts';

/**
 * A public URL that a SIWE message cannot carry fails the service's start (config_invalid), as it did
 * when the check ran at construction; the check is now awaited by the start, so that the usual local
 * bind address (localhost or an IPv4 address) is passed without importing viem before serving.
 */
describe('the public URL a SIWE message must carry', () => {
  const refusal = async (gateway: { publicUrl?: string; host?: string }): Promise<unknown> => {
    const kernel = await openTestKernel({ config: { gateway } });
    try {
      return await gatewayAuth(kernel)
        .assertPublicUrlFits()
        .then(
          () => undefined,
          (err: unknown) => err,
        );
    } finally {
      await kernel.close();
    }
  };

  it('refuses a single-label public host at start, naming the setting', async () => {
    const err = await refusal({ publicUrl: 'http://gateway:8080' });
    expect(err).to.be.instanceOf(SigilError);
    expect((err as SigilError).code).to.equal('config_invalid');
    expect((err as SigilError).message).to.match(
      /^gateway\.publicUrl \(http:\/\/gateway:8080\) cannot be used/,
    );
  });

  it('refuses a bind address on a single-label host, which stands in for the public URL', async () => {
    expect(((await refusal({ host: 'gateway' })) as SigilError).code).to.equal('config_invalid');
  });

  for (const gateway of [
    { publicUrl: 'https://gateway.example.com/sigil' },
    { host: '127.0.0.1' },
    { host: 'localhost' },
  ])
    it(`accepts ${JSON.stringify(gateway)}`, async () => {
      expect(await refusal(gateway)).to.equal(undefined);
    });
});
