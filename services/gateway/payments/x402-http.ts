import { importedOnce } from '../../../core/imported-once.ts';

/**
 * x402's HTTP header codecs (PAYMENT-REQUIRED, PAYMENT-SIGNATURE, PAYMENT-RESPONSE), imported when a
 * header is first read or written, not with the gateway's modules: with the zod 3 they bring, they cost
 * ~55 ms of every start (issue 30), and a gateway without a payment rail writes none of them.
 */
export const x402Http = importedOnce(() => import('@x402/core/http'));
