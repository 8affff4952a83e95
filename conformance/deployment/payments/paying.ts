import { failWith, notApplicableBecause, type X402PaymentRequiredWire } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../../http.ts';
import { specPriceUnits } from '../../x402.ts';
import { path } from '../catalog.ts';
import type { DeploymentContext } from '../context.ts';
import { PAYER_OPTIONS } from '../mcp.ts';
import { requiredOfResponse, type Payer, type Payment } from '../payer.ts';
import { smokeCall } from '../tool-calls.ts';
import { restCall } from './messages.ts';

/** What the checks that move money need: the tester's payer, a payment, the chain's word on it. */

/** How long a settlement may take to show on chain after the paid answer (a gateway may settle later). */
export const SETTLEMENT_WAIT_MS = 30_000;
/** How long after a failed call the runner still watches for a late charge. */
export const LATE_CHARGE_GRACE_MS = 2_000;

/** The tester's payer, able to read the chain; otherwise the check is not applicable. */
export function payerFor(context: DeploymentContext): Payer {
  const { payer } = context;
  if (!payer) notApplicableBecause(`no payer was given: ${PAYER_OPTIONS}`);
  if (!payer.canReadChain)
    notApplicableBecause('no --rpc-url was given: what a payment moved cannot be read on chain');
  return payer;
}

/** A servable server's smoke tool, its 402 over REST, and the runner's payment for that call. */
export async function firstPaymentForSmokeTool(context: DeploymentContext) {
  const payer = payerFor(context);
  const { server, tool, args } = await smokeCall(context);
  const id = server.view.id;
  const what = `POST ${path.tool(id, tool.name)}`;
  const required = requireCharged(await context.http.request(restCall(id, tool, args)), what);
  return { payer, id, tool, args, what, payment: await payer.pay(required, context.evidence, what) };
}

/** Ends the check as not applicable when the deployment asks no payment for a call. */
function requireCharged(response: HttpResponse, what: string): X402PaymentRequiredWire {
  if (response.status !== 402) {
    notApplicableBecause(
      `${what} without a payment answered HTTP ${response.status}, not 402: the deployment did not ask for a payment (GW-4.x402-payment-required judges that)`,
    );
  }
  const required = requiredOfResponse(response);
  if (!required) {
    notApplicableBecause(
      `${what} answered 402 without an x402 v2 PAYMENT-REQUIRED the runner can pay (GW-4.x402-payment-required judges that)`,
    );
  }
  return required;
}

/** The spec's price in base units of the asset, by the decimals the chain gives it. */
export async function specPrice(payer: Payer, asset: string): Promise<{ units: bigint; decimals: number }> {
  const decimals = await payer.decimals(asset);
  if (decimals === undefined) failWith(`the asset ${asset} answers no decimals() on the chain of --rpc-url`);
  const units = specPriceUnits(decimals);
  if (units === undefined)
    failWith(`the asset ${asset} has ${decimals} decimals: 0.0005 USD is no whole number of base units`);
  return { units, decimals };
}

/** Waits until the chain shows the payment's authorization used; false when it never does. */
export async function settles(context: DeploymentContext, payer: Payer, payment: Payment): Promise<boolean> {
  const deadline = Date.now() + SETTLEMENT_WAIT_MS;
  for (;;) {
    const used = await payer.authorizationUsed(payment);
    if (used !== false) {
      context.evidence.note(
        `on chain: the authorization is ${used === true ? 'used' : 'of unknown state (no authorizationState)'}`,
      );
      return used ?? true;
    }
    if (Date.now() > deadline) return false;
    await sleep(250);
  }
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
