import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Abi, Hex } from 'viem';

/**
 * The compiled SigilDollar (contracts/SigilDollar.json, written by `npm run contracts`). Read from
 * the committed artifact, so deploying never loads the compiler.
 */
export interface SigilDollarArtifact {
  contractName: 'SigilDollar';
  sourcePath: string;
  /** SHA-256 of the source the artifact was compiled from: a stale artifact is caught by a test. */
  sourceSha256: string;
  compiler: {
    name: 'solc';
    version: string;
    /** The standard-JSON input minus the source text: with the source it reproduces the bytecode. */
    input: { language: 'Solidity'; settings: Record<string, unknown> };
  };
  abi: Abi;
  bytecode: Hex;
  deployedBytecode: Hex;
}

export const SIGIL_DOLLAR_SOURCE_PATH = fileURLToPath(new URL('./SigilDollar.sol', import.meta.url));
export const SIGIL_DOLLAR_ARTIFACT_PATH = fileURLToPath(new URL('./SigilDollar.json', import.meta.url));

export function readSigilDollarArtifact(): SigilDollarArtifact {
  return JSON.parse(readFileSync(SIGIL_DOLLAR_ARTIFACT_PATH, 'utf8')) as SigilDollarArtifact;
}
