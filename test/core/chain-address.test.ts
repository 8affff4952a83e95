import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { getAddress } from 'viem';
import { checksumAddress } from '../../core/chain/address.ts';

/** checksumAddress (ox's) stands in for viem's getAddress in the ledger: same answers, same refusals. */
describe('checksumAddress', () => {
  const cases = (hex: string) => [`0x${hex}`, `0x${hex.toUpperCase()}`, `0x${hex.toLowerCase()}`];

  it('gives viem getAddress’s EIP-55 form for any case of an address', () => {
    const addresses = [
      // EIP-55's own examples, all caps, all lower, mixed.
      '52908400098527886E0F7030069857D2E4169EE7',
      'de709f2102306220921060314715629080e2fb77',
      '5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed',
      '0000000000000000000000000000000000000000',
      'ffffffffffffffffffffffffffffffffffffffff',
      ...Array.from({ length: 200 }, () => randomBytes(20).toString('hex')),
    ];
    for (const address of addresses.flatMap(cases))
      expect(checksumAddress(address), address).to.equal(getAddress(address));
    expect(checksumAddress('0x52908400098527886e0f7030069857d2e4169ee7')).to.equal(
      '0x52908400098527886E0F7030069857D2E4169EE7',
    );
  });

  it('refuses what viem getAddress refuses', () => {
    for (const bad of [
      '',
      '0x',
      '52908400098527886E0F7030069857D2E4169EE7',
      '0x52908400098527886E0F7030069857D2E4169EE',
      '0x52908400098527886E0F7030069857D2E4169EE77',
      '0x52908400098527886E0F7030069857D2E4169EEg',
      '0X52908400098527886E0F7030069857D2E4169EE7',
      ' 0x52908400098527886E0F7030069857D2E4169EE7',
    ]) {
      expect(() => getAddress(bad), `viem: ${bad}`).to.throw();
      expect(() => checksumAddress(bad), bad).to.throw();
    }
  });
});
