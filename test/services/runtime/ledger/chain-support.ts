import { expect } from 'chai';
import { toHex, type Address, type LocalAccount } from 'viem';
import { english, generateMnemonic, generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { SigilConfig } from '../../../../services/config.ts';
import { devWallet } from '../../../../devchain/index.ts';
import { chainClients, sigilDollarAbi } from '../../../solidity/support.ts';
import type { DevChain } from '../../../support/chain.ts';

/** Anvil's dev account the ledger's operator uses in these tests (pays the gas of sweeps and withdrawals). */
export const LEDGER_OPERATOR_INDEX = 3;

/** The ledger section pointing at a dev chain: a fresh treasury, 3 confirmations, fast polling. */
export function ledgerOnChain(
  chain: DevChain,
  overrides: Partial<SigilConfig['ledger']> = {},
): Partial<SigilConfig['ledger']> & { treasury: Address } {
  return {
    // Its own mnemonic per world: deposit addresses of one are never another's on the shared chain.
    depositMnemonic: generateMnemonic(english),
    rpcUrl: chain.rpcUrl,
    chainId: chain.chainId,
    tokenAddress: chain.token.address,
    treasury: privateKeyToAccount(generatePrivateKey()).address,
    operatorKey: devWallet(LEDGER_OPERATOR_INDEX).privateKey,
    confirmations: 3,
    pollIntervalMs: 100,
    ...overrides,
  } as Partial<SigilConfig['ledger']> & { treasury: Address };
}

/** Mines `blocks` empty blocks on anvil. */
export async function mine(chain: DevChain, blocks: number): Promise<void> {
  const { publicClient } = chainClients(chain);
  await publicClient.request({ method: 'anvil_mine' as never, params: [toHex(blocks)] as never });
}

export async function blockNumber(chain: DevChain): Promise<bigint> {
  return chainClients(chain).publicClient.getBlockNumber({ cacheTime: 0 });
}

/** Mints `amount` base units to a fresh account (the operator owns the token), returning it. */
export async function fundedAccount(chain: DevChain, amount: bigint): Promise<LocalAccount> {
  const account = privateKeyToAccount(generatePrivateKey());
  const { publicClient, operatorWallet } = chainClients(chain);
  const minted = await operatorWallet.writeContract({
    address: chain.token.address,
    abi: sigilDollarAbi,
    functionName: 'mint',
    args: [account.address, amount],
  });
  expect((await publicClient.waitForTransactionReceipt({ hash: minted })).status).to.equal('success');
  // Ether for gas, so the account can send the token itself.
  const gas = await operatorWallet.sendTransaction({ to: account.address, value: 10n ** 17n });
  await publicClient.waitForTransactionReceipt({ hash: gas });
  return account;
}

/** `from` sends `amount` of the token to `to`; resolves with the block it was mined in. */
export async function sendToken(
  chain: DevChain,
  from: LocalAccount,
  to: Address,
  amount: bigint,
): Promise<bigint> {
  const { publicClient, walletFor } = chainClients(chain);
  const hash = await walletFor(from).writeContract({
    address: chain.token.address,
    abi: sigilDollarAbi,
    functionName: 'transfer',
    args: [to, amount],
  });
  const receipt = await publicClient.waitForTransactionReceipt({ hash });
  expect(receipt.status).to.equal('success');
  return receipt.blockNumber;
}

export async function tokenBalance(chain: DevChain, account: Address): Promise<bigint> {
  return chainClients(chain).publicClient.readContract({
    address: chain.token.address,
    abi: sigilDollarAbi,
    functionName: 'balanceOf',
    args: [account],
  });
}
