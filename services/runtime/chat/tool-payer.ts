import { x402Client } from '@x402/core/client';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { privateKeyToAccount } from 'viem/accounts';
import type { ToolPayments } from './tools.ts';

/** The x402 client that pays a chat's paid tools with the operator wallet, in the ledger's token only. */
export const toolPayer = (payments: ToolPayments): x402Client =>
  new x402Client()
    .register(payments.network, new ExactEvmScheme(privateKeyToAccount(payments.payerKey)))
    .setSpendControls({ allowedAssets: [{ network: payments.network, asset: payments.asset }] });
