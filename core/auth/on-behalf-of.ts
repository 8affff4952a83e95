import { SigilError } from '@sigil/plugin-api';
import { viemUtils } from '../chain/viem.ts';
import type { IncomingRequest } from '../http/incoming.ts';
import type { SignedRequest } from './erc8128.ts';
import type { AuthPrincipal } from './principal.ts';
import type { AuthSettings } from './settings.ts';

/**
 * The header with which an operator's ERC-8128 signed request names the wallet it acts for (the
 * runtime's operator path): the gateway then scopes sessions, secrets and limits to that wallet.
 */
export const ON_BEHALF_OF_HEADER = 'x-sigil-on-behalf-of';

const refused = (message: string, reason: string): SigilError =>
  new SigilError('forbidden', message, {
    hint: `${ON_BEHALF_OF_HEADER} is accepted only on a request an operator wallet (gateway.operatorWallets) signs with ERC-8128, the signature covering the header`,
    details: { reason },
  });

/**
 * The wallet a request acts for, when it names one; refuses (403, nothing done) unless the service
 * accepts it, the request is signed by an operator wallet, and the signature covers the header, so an
 * ordinary wallet can never act for another and the header cannot be added to a signed request.
 */
export async function onBehalfOf(
  request: IncomingRequest,
  settings: AuthSettings,
  signed: SignedRequest | undefined,
): Promise<AuthPrincipal | undefined> {
  const named = request.header(ON_BEHALF_OF_HEADER);
  if (named === '') return undefined;
  if (!settings.actingForWallets)
    throw refused(`This service does not accept ${ON_BEHALF_OF_HEADER}`, 'on_behalf_of_not_accepted');
  if (signed === undefined)
    throw refused(`${ON_BEHALF_OF_HEADER} needs an ERC-8128 signed request`, 'on_behalf_of_unsigned');
  if (!settings.operators.has(signed.signer.toLowerCase()))
    throw refused(`${signed.signer} is not an operator wallet: it cannot act for another`, 'not_an_operator');
  if (!signed.covers.has(ON_BEHALF_OF_HEADER))
    throw refused(`The signature does not cover ${ON_BEHALF_OF_HEADER}`, 'on_behalf_of_not_signed');
  const { getAddress, isAddress } = await viemUtils();
  if (!isAddress(named, { strict: false }))
    throw new SigilError('invalid_request', `${ON_BEHALF_OF_HEADER} must be a 0x-prefixed 20-byte address`);
  // The operator speaks for the wallet, as a delegated JWT does: no operator rights come with it.
  return {
    address: getAddress(named),
    method: 'operator-on-behalf',
    operator: false,
    actingOperator: signed.signer,
  };
}
