import { z } from 'zod';
import {
  type AuthorizationStatus,
  definePlugin,
  type OnChainSettlement,
  type PaymentRailV1,
  type PaymentResource,
  type PaymentTerms,
  type SettleOutcome,
  SigilError,
  type VerifiedPayment,
  type VerifyOutcome,
  type X402PaymentRequired,
} from '@sigil/plugin-api';

/** Options an operator gives under `plugins[].options`, checked at start-up. */
const config = z
  .object({
    rpcUrl: z.url().default('http://127.0.0.1:8545').describe('The chain this rail settles on'),
  })
  .strict();

const notImplemented = (member: string): SigilError =>
  new SigilError('internal', `template-plugin-name: ${member} is not implemented yet`);

/**
 * A `payment-rail` (the contract: PaymentRailV1 in @sigil/plugin-api). Fill in each member; the kit in
 * test/kit.test.ts checks every sentence of the contract and fails until you do.
 */
class Rail implements PaymentRailV1 {
  readonly specVersion = 'v1';

  constructor(private readonly options: z.infer<typeof config>) {}

  terms(): PaymentTerms {
    throw notImplemented('terms');
  }

  paymentRequired(_resource: PaymentResource, _error?: string): X402PaymentRequired {
    throw notImplemented('paymentRequired');
  }

  async verify(_payload: unknown): Promise<VerifyOutcome> {
    throw notImplemented('verify');
  }

  async settle(_payment: VerifiedPayment): Promise<SettleOutcome> {
    throw notImplemented('settle');
  }

  async status(_payment: VerifiedPayment): Promise<AuthorizationStatus> {
    throw notImplemented('status');
  }

  async settlementsOnChain(_fromBlock: bigint): Promise<OnChainSettlement[]> {
    throw notImplemented('settlementsOnChain');
  }
}

export default definePlugin({
  kind: 'payment-rail',
  name: 'template-plugin-name',
  specVersion: 'v1',
  description: 'template-plugin-name: a payment rail',
  config,
  create: ({ config: options }) => new Rail(options),
});
