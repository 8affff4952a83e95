import type { PaymentRailV1 } from '../../core/plugins/contracts/index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/** `payment-rail` v1 kit: for now the contract's shape; behaviour lands in `behaviour`. */
export const paymentRailKit: ContractKit<'payment-rail'> = {
  kind: 'payment-rail',
  contractFile: 'core/plugins/contracts/payment-rail-v1.ts',
  members: {
    terms: 'function',
    paymentRequired: 'function',
    verify: 'function',
    settle: 'function',
    status: 'function',
    settlementsOnChain: 'function',
  },
  behaviour: [],
};

export const describePaymentRailKit = (load: () => Promise<PaymentRailV1>): void =>
  describeContractKit(paymentRailKit, load);
