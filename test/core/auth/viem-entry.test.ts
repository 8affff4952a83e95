import { expect } from 'chai';
import * as viem from 'viem';
import * as viemUtils from 'viem/utils';

/**
 * The gateway's auth imports viem's utilities from `viem/utils`, not from `viem`, whose entry loads
 * all of viem (clients, actions, chains: twice the modules) at start-up (issue 30). Both entries must
 * give the very same functions, so the choice of entry changes what loads and nothing else.
 */
describe('viem/utils, the entry the auth imports from', () => {
  for (const name of ['getAddress', 'isAddress', 'verifyMessage', 'formatUnits'] as const) {
    it(`gives viem's own ${name}`, () => {
      expect(viemUtils[name]).to.be.a('function');
      expect(viemUtils[name]).to.equal(viem[name]);
    });
  }
});
