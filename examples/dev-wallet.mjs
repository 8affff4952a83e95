// The wallet the examples act as.
import { mnemonicToAccount, privateKeyToAccount } from 'viem/accounts';

/**
 * PAYER_KEY, else account 1 of anvil's public dev mnemonic, the wallet `npm start` funds with 1000
 * dollars of its token on the local dev chain (its `payer` line). A public key: never for real funds.
 */
export const account = process.env.PAYER_KEY
  ? privateKeyToAccount(/** @type {`0x${string}`} */ (process.env.PAYER_KEY))
  : mnemonicToAccount('test test test test test test test test test test test junk', { addressIndex: 1 });
