import { expect } from 'chai';
import { mnemonicToAccount } from 'viem/accounts';
import { DEV_DEPOSIT_MNEMONIC } from '../../../../services/runtime/ledger/config.ts';
import { SigilError } from '@sigil/plugin-api';
import {
  DepositKeys,
  mnemonicProblem,
  normalizeMnemonic,
} from '../../../../services/runtime/ledger/deposit-keys.ts';
import { createLedgerService } from '../../../../services/runtime/ledger/service.ts';
import { describeEachDatabase, stickyDatabase } from '../../../support/kernel.ts';
import { openLedgerWorld, randomWallet } from './support.ts';

const OTHER_MNEMONIC = 'legal winner thank year wave sausage worth useful legal winner thank yellow';

describe('ledger: deposit keys', () => {
  it('derive the standard BIP-44 Ethereum accounts of the mnemonic (any wallet recovers them)', () => {
    const keys = new DepositKeys(DEV_DEPOSIT_MNEMONIC);
    for (const index of [0, 1, 7, 1000]) {
      expect(keys.address(index)).to.equal(
        mnemonicToAccount(DEV_DEPOSIT_MNEMONIC, { addressIndex: index }).address,
      );
    }
  });

  it('refuse a mnemonic with a wrong word count, an unknown word or a bad checksum, naming the problem', () => {
    expect(mnemonicProblem(normalizeMnemonic(OTHER_MNEMONIC))).to.equal(undefined);
    expect(mnemonicProblem('legal winner thank')).to.match(/3 words/);
    expect(mnemonicProblem(OTHER_MNEMONIC.replace('sausage', 'sausages'))).to.match(/word 6/);
    expect(mnemonicProblem(OTHER_MNEMONIC.replace('yellow', 'legal'))).to.match(/checksum/);
    expect(() => new DepositKeys('not a mnemonic')).to.throw(SigilError, /ledger\.depositMnemonic/);
  });
});

describeEachDatabase('ledger: deposit addresses', (database) => {
  it('one per wallet, assigned once even under concurrency, unique, and the same after a restart', async () => {
    const sticky = stickyDatabase(database);
    const config = { ledger: { depositMnemonic: DEV_DEPOSIT_MNEMONIC } };
    let world = await openLedgerWorld(sticky.database, { config });
    try {
      const wallets = Array.from({ length: 5 }, () => randomWallet());
      const all = await Promise.all(
        wallets.flatMap((wallet) => Array.from({ length: 10 }, () => world.service.deposits.of(wallet))),
      );
      const byWallet = new Map<string, Set<string>>();
      for (const deposit of all)
        byWallet.set(deposit.wallet, (byWallet.get(deposit.wallet) ?? new Set()).add(deposit.address));
      for (const wallet of wallets) expect(byWallet.get(wallet)?.size, wallet).to.equal(1);
      const addresses = wallets.map((wallet) => [...(byWallet.get(wallet) as Set<string>)][0]);
      expect(new Set(addresses).size).to.equal(5);
      const indexes = new Set(all.map((d) => d.index));
      expect(indexes.size).to.equal(5);
      for (const deposit of all) {
        expect(deposit.address).to.equal(
          mnemonicToAccount(DEV_DEPOSIT_MNEMONIC, { addressIndex: deposit.index }).address,
        );
      }
      await world.close();
      world = await openLedgerWorld(sticky.database, { config });
      await world.service.start();
      for (const [i, wallet] of wallets.entries()) {
        expect((await world.service.deposits.of(wallet)).address).to.equal(addresses[i]);
      }
      // Another mnemonic would show addresses nobody watches: start-up refuses it.
      const wrong = await openLedgerWorld(sticky.database, {
        config: { ledger: { depositMnemonic: OTHER_MNEMONIC } },
      });
      try {
        const err = await wrong.service.start().then(
          () => undefined,
          (e: unknown) => e as SigilError,
        );
        expect(err?.code).to.equal('config_invalid');
        expect(err?.message).to.match(/does not derive the deposit addresses/);
      } finally {
        await wrong.close();
      }
    } finally {
      await world.close();
      await sticky.drop();
    }
  });

  it('without a mnemonic there is no deposit address: 503 with a hint for the operator', async () => {
    const world = await openLedgerWorld(database);
    try {
      const service = await createLedgerService(world.kernel);
      const err = (await service.deposits.of(randomWallet()).then(
        () => undefined,
        (e: unknown) => e,
      )) as SigilError;
      expect(err.code).to.equal('unavailable');
      expect(err.hint).to.match(/LEDGER_DEPOSIT_MNEMONIC/);
    } finally {
      await world.close();
    }
  });
});
