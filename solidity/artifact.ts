import { readFileSync } from 'node:fs';
import type { Abi, Hex } from 'viem';

/**
 * A compiled contract of this project (solidity/<Name>.json, written by `npm run solidity`).
 * Read from the committed artifact, so deploying never loads the compiler.
 */
export interface ContractArtifact<Name extends string = string> {
  contractName: Name;
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

/** Where a contract's source and artifact live; the source file is `<contractName>.sol`. */
export interface ContractFiles<Name extends string = string> {
  contractName: Name;
  sourcePath: string;
  artifactPath: string;
}

export function readContractArtifact<Name extends string>(
  files: ContractFiles<Name>,
): ContractArtifact<Name> {
  return JSON.parse(readFileSync(files.artifactPath, 'utf8')) as ContractArtifact<Name>;
}
