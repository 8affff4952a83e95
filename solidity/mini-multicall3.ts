import { fileURLToPath } from 'node:url';
import type { Address } from 'viem';
import { readContractArtifact, type ContractArtifact, type ContractFiles } from './artifact.ts';

/** The compiled MiniMulticall3 (solidity/MiniMulticall3.json, written by `npm run solidity`). */
export type MiniMulticall3Artifact = ContractArtifact<'MiniMulticall3'>;

/** Where Multicall3 lives on every public EVM chain, and where x402's facilitator calls it. */
export const MULTICALL3_ADDRESS: Address = '0xcA11bde05977b3631167028862bE2a173976CA11';

export const MINI_MULTICALL3: ContractFiles<'MiniMulticall3'> = {
  contractName: 'MiniMulticall3',
  sourcePath: fileURLToPath(new URL('./MiniMulticall3.sol', import.meta.url)),
  artifactPath: fileURLToPath(new URL('./MiniMulticall3.json', import.meta.url)),
};

export function readMiniMulticall3Artifact(): MiniMulticall3Artifact {
  return readContractArtifact(MINI_MULTICALL3);
}
