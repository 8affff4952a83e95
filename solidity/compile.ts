/**
 * Compiles the project's contracts (solidity/<Name>.sol) with solc-js (the `solc` npm package,
 * offline) and writes each artifact, solidity/<Name>.json. Run it after changing a source:
 *
 *   npm run solidity        (node --import tsx solidity/compile.ts)
 *
 * test/solidity/contract-artifact.test.ts recompiles and fails when a committed artifact differs.
 */
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as prettier from 'prettier';
import solc from 'solc';
import type { Abi, Hex } from 'viem';
import { z } from 'zod';
import type { ContractArtifact, ContractFiles } from './artifact.ts';
import { MINI_MULTICALL3 } from './mini-multicall3.ts';
import { SIGIL_DOLLAR } from './sigil-dollar.ts';

/** Every contract `npm run solidity` compiles and the artifact test checks. */
export const CONTRACTS: readonly ContractFiles[] = [SIGIL_DOLLAR, MINI_MULTICALL3];

/**
 * Everything besides the source that decides the bytecode. The EVM version is pinned rather than
 * left to the compiler's default, so a newer solc cannot emit opcodes an older chain lacks; Cancun
 * runs on anvil and on Base. The metadata hash stays on: it covers the source text, so any edit of
 * the source, comments included, changes the bytecode and the artifact test notices.
 */
export function compilerSettings(contractName: string) {
  return {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'cancun',
    metadata: { bytecodeHash: 'ipfs' },
    outputSelection: {
      // The source's name inside the compiler input ends up in the metadata, so it is fixed.
      [sourceUnit(contractName)]: {
        [contractName]: ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'],
      },
    },
  };
}

function sourceUnit(contractName: string): string {
  return `${contractName}.sol`;
}

const diagnosticSchema = z.object({
  severity: z.string(),
  formattedMessage: z.string().optional(),
  message: z.string(),
});
const outputSchema = z.object({
  errors: z.array(diagnosticSchema).optional(),
  contracts: z
    .record(
      z.string(),
      z.record(
        z.string(),
        z.object({
          abi: z.array(z.record(z.string(), z.unknown())),
          evm: z.object({
            bytecode: z.object({ object: z.string() }),
            deployedBytecode: z.object({ object: z.string() }),
          }),
        }),
      ),
    )
    .optional(),
});

export interface CompileResult<Name extends string = string> {
  artifact: ContractArtifact<Name>;
  /** Compiler warnings: the sources are expected to have none. */
  warnings: string[];
}

export function compileContract<Name extends string>(
  contract: ContractFiles<Name>,
  source: string = readFileSync(contract.sourcePath, 'utf8'),
): CompileResult<Name> {
  const { contractName } = contract;
  const unit = sourceUnit(contractName);
  const settings = compilerSettings(contractName);
  const input = {
    language: 'Solidity' as const,
    sources: { [unit]: { content: source } },
    settings,
  };
  // solc-js is untyped: its standard-JSON interface takes and returns JSON text.
  const compile = solc.compile as (json: string) => string;
  const output = outputSchema.parse(JSON.parse(compile(JSON.stringify(input))));
  const diagnostics = output.errors ?? [];
  const describe = (d: z.infer<typeof diagnosticSchema>) => d.formattedMessage ?? d.message;
  const errors = diagnostics.filter((d) => d.severity === 'error').map(describe);
  if (errors.length > 0) throw new Error(`${unit} does not compile:\n${errors.join('\n')}`);
  const compiled = output.contracts?.[unit]?.[contractName];
  if (!compiled) throw new Error(`solc returned no ${contractName} contract`);
  const artifact: ContractArtifact<Name> = {
    contractName,
    sourcePath: relative(fileURLToPath(new URL('..', import.meta.url)), contract.sourcePath),
    sourceSha256: sha256(source),
    compiler: {
      name: 'solc',
      version: solc.version() as string,
      input: { language: 'Solidity', settings },
    },
    abi: compiled.abi as unknown as Abi,
    bytecode: `0x${compiled.evm.bytecode.object}` as Hex,
    deployedBytecode: `0x${compiled.evm.deployedBytecode.object}` as Hex,
  };
  return { artifact, warnings: diagnostics.filter((d) => d.severity !== 'error').map(describe) };
}

export function compileSigilDollar(source?: string): CompileResult<'SigilDollar'> {
  return compileContract(SIGIL_DOLLAR, source);
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The artifact as committed: JSON in the repository's prettier style, so `npm run lint` accepts it. */
export async function formatArtifact(
  artifact: ContractArtifact,
  artifactPath: string = SIGIL_DOLLAR.artifactPath,
): Promise<string> {
  const options = await prettier.resolveConfig(artifactPath);
  return prettier.format(JSON.stringify(artifact), { ...options, filepath: artifactPath });
}

async function main(): Promise<void> {
  for (const contract of CONTRACTS) {
    const { artifact, warnings } = compileContract(contract);
    for (const warning of warnings) process.stderr.write(`${warning}\n`);
    writeFileSync(contract.artifactPath, await formatArtifact(artifact, contract.artifactPath));
    process.stdout.write(
      `${relative(process.cwd(), contract.artifactPath)}: solc ${artifact.compiler.version}, ` +
        `${(artifact.deployedBytecode.length - 2) / 2} bytes deployed\n`,
    );
  }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) await main();
