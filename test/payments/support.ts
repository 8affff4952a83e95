import { x402Client } from '@x402/core/client';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { createPublicClient, http, parseAbi, type Address, type LocalAccount } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { SigilConfig } from '../../core/config/schema.ts';
import type { DevChain } from '../support/chain.ts';

const balanceAbi = parseAbi(['function balanceOf(address account) view returns (uint256)']);

/** The payment rail plugin on the dev chain, settling from the operator's account to a fresh payee. */
export function railPlugin(
  chain: DevChain,
  options: Record<string, unknown> = {},
): { plugin: SigilConfig['plugins'][number]; payTo: Address } {
  const payTo = privateKeyToAccount(generatePrivateKey()).address;
  const plugin = {
    resolve: 'payments-x402-evm',
    enabled: true,
    options: {
      network: `eip155:${chain.chainId}`,
      rpcUrl: chain.rpcUrl,
      asset: chain.token,
      payTo,
      facilitator: { kind: 'builtin', privateKey: chain.accounts.operator.privateKey },
      ...options,
    },
  };
  return { plugin, payTo };
}

/** An x402 client paying in the dev chain's token (x402's default spend controls know only Base USDC). */
export function payingClient(
  chain: DevChain,
  account: LocalAccount = privateKeyToAccount(chain.accounts.payer.privateKey),
): x402Client {
  return new x402Client().register(`eip155:${chain.chainId}`, new ExactEvmClient(account)).setSpendControls({
    allowedAssets: [{ network: `eip155:${chain.chainId}`, asset: chain.token.address }],
  });
}

export const pay = (client: x402Client, required: PaymentRequired): Promise<PaymentPayload> =>
  client.createPaymentPayload(required);

export function balances(chain: DevChain) {
  const publicClient = createPublicClient({ transport: http(chain.rpcUrl) });
  return (account: Address): Promise<bigint> =>
    publicClient.readContract({
      address: chain.token.address,
      abi: balanceAbi,
      functionName: 'balanceOf',
      args: [account],
    });
}
