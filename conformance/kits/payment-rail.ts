import type { PaymentRailV1 } from '../../core/plugins/contracts/index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/** `payment-rail` v1 kit: for now the contract's shape; behaviour lands in `behaviour`. */
export const paymentRailKit: ContractKit<'payment-rail'> = {
  kind: 'payment-rail',
  contractFile: 'core/plugins/contracts/payment-rail-v1.ts',
  members: { requirements: 'function', verify: 'function', settle: 'function', release: 'function' },
  // Next, one check per promise of payment-rail-v1.ts, on a local chain:
  // - requirements() amounts are integer base units;
  // - verify() reserves atomically and refuses a payment already used or reserved;
  // - settle() called twice for one payment id moves the money once;
  // - release() charges nothing.
  behaviour: [],
};

export const describePaymentRailKit = (load: () => Promise<PaymentRailV1>): void =>
  describeContractKit(paymentRailKit, load);
