import { createHash, pbkdf2Sync } from 'node:crypto';
import { english, HDKey, hdKeyToAccount, type HDAccount } from 'viem/accounts';
import { SigilError } from '@sigil/plugin-api';

/**
 * Deposit addresses are BIP-44 accounts of one operator mnemonic, `m/44'/60'/0'/0/<index>`, the path
 * every Ethereum wallet uses: with the mnemonic and a wallet's index (kept in the database), any wallet
 * software recovers the deposit address's key. The mnemonic should serve nothing else.
 */
export class DepositKeys {
  private readonly root: HDKey;
  private readonly accounts = new Map<number, HDAccount>();

  constructor(mnemonic: string) {
    const normalized = normalizeMnemonic(mnemonic);
    const problem = mnemonicProblem(normalized);
    if (problem !== undefined) {
      throw new SigilError(
        'config_invalid',
        `ledger.depositMnemonic is not a valid BIP-39 mnemonic: ${problem}`,
        {
          hint: 'Use 12 to 24 English BIP-39 words, e.g. from generateMnemonic(english) in viem',
        },
      );
    }
    // BIP-39 seed: PBKDF2-HMAC-SHA512 of the NFKD words, salt "mnemonic" (no passphrase), 2048 rounds.
    const seed = pbkdf2Sync(
      Buffer.from(normalized, 'utf8'),
      Buffer.from('mnemonic', 'utf8'),
      2048,
      64,
      'sha512',
    );
    this.root = HDKey.fromMasterSeed(seed);
  }

  /** The deposit account at `index` (derived once per process: a derivation takes a few ms). */
  account(index: number): HDAccount {
    if (!Number.isSafeInteger(index) || index < 0 || index >= 2 ** 31) {
      throw new SigilError('internal', `Deposit index out of range: ${index}`);
    }
    let account = this.accounts.get(index);
    if (!account) {
      account = hdKeyToAccount(this.root, { addressIndex: index });
      this.accounts.set(index, account);
    }
    return account;
  }

  address(index: number): `0x${string}` {
    return this.account(index).address;
  }
}

export const normalizeMnemonic = (mnemonic: string): string =>
  mnemonic.normalize('NFKD').trim().toLowerCase().split(/\s+/).join(' ');

/** Why `mnemonic` is not a valid English BIP-39 mnemonic (word count, unknown word, checksum), or undefined. */
export function mnemonicProblem(mnemonic: string): string | undefined {
  const words = mnemonic.split(' ');
  if (![12, 15, 18, 21, 24].includes(words.length))
    return `${words.length} words (12, 15, 18, 21 or 24 expected)`;
  const indexes = words.map((word) => english.indexOf(word));
  const unknown = indexes.findIndex((index) => index < 0);
  if (unknown >= 0) return `word ${unknown + 1} is not in the English BIP-39 list`;
  const bits = indexes.map((index) => index.toString(2).padStart(11, '0')).join('');
  const checksumBits = words.length / 3;
  const entropyBits = bits.slice(0, bits.length - checksumBits);
  const entropy = Buffer.from(
    Array.from({ length: entropyBits.length / 8 }, (_, i) =>
      parseInt(entropyBits.slice(i * 8, i * 8 + 8), 2),
    ),
  );
  const expected = createHash('sha256')
    .update(entropy)
    .digest()
    .reduce((text, byte) => text + byte.toString(2).padStart(8, '0'), '')
    .slice(0, checksumBits);
  return expected === bits.slice(bits.length - checksumBits)
    ? undefined
    : 'its checksum does not match (a word is wrong)';
}
