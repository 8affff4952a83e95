/**
 * An address in its EIP-55 checksummed form; throws for anything but 0x and 40 hex digits (any case),
 * as viem's `getAddress` does. ox's (the primitives viem is built on; 26 modules), because importing
 * viem's index for it loads ~360, a quarter of `sigil up`'s start (issue 30, start-up), and the
 * ledger checksums wallets in synchronous code, where viem could not be imported at first use.
 */
export { checksum as checksumAddress } from 'ox/Address';
