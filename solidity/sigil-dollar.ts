import { fileURLToPath } from 'node:url';
import { readContractArtifact, type ContractArtifact, type ContractFiles } from './artifact.ts';

/** The compiled SigilDollar (solidity/SigilDollar.json, written by `npm run solidity`). */
export type SigilDollarArtifact = ContractArtifact<'SigilDollar'>;

export const SIGIL_DOLLAR_SOURCE_PATH = fileURLToPath(new URL('./SigilDollar.sol', import.meta.url));
export const SIGIL_DOLLAR_ARTIFACT_PATH = fileURLToPath(new URL('./SigilDollar.json', import.meta.url));

export const SIGIL_DOLLAR: ContractFiles<'SigilDollar'> = {
  contractName: 'SigilDollar',
  sourcePath: SIGIL_DOLLAR_SOURCE_PATH,
  artifactPath: SIGIL_DOLLAR_ARTIFACT_PATH,
};

export function readSigilDollarArtifact(): SigilDollarArtifact {
  return readContractArtifact(SIGIL_DOLLAR);
}
