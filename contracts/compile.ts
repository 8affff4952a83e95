/**
 * Compiles contracts/SigilDollar.sol with solc-js (the `solc` npm package, offline) and writes the
 * artifact contracts/SigilDollar.json. Run it after changing the source:
 *
 *   npm run contracts        (node --import tsx contracts/compile.ts)
 *
 * test/chain/contract-artifact.test.ts recompiles and fails when the committed artifact differs.
 */
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as prettier from 'prettier';
import solc from 'solc';
import type { Abi, Hex } from 'viem';
import { z } from 'zod';
import {
  SIGIL_DOLLAR_ARTIFACT_PATH,
  SIGIL_DOLLAR_SOURCE_PATH,
  type SigilDollarArtifact,
} from './sigil-dollar.ts';

/** The source's name inside the compiler input; it ends up in the metadata, so it is fixed. */
const SOURCE_UNIT = 'SigilDollar.sol';

/**
 * Everything besides the source that decides the bytecode. The EVM version is pinned rather than
 * left to the compiler's default, so a newer solc cannot emit opcodes an older chain lacks; Cancun
 * runs on anvil and on Base. The metadata hash stays on: it covers the source text, so any edit of
 * the source, comments included, changes the bytecode and the artifact test notices.
 */
export const COMPILER_SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: 'cancun',
  metadata: { bytecodeHash: 'ipfs' },
  outputSelection: {
    [SOURCE_UNIT]: { SigilDollar: ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] },
  },
};

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

export interface CompileResult {
  artifact: SigilDollarArtifact;
  /** Compiler warnings: the source is expected to have none. */
  warnings: string[];
}

export function compileSigilDollar(
  source: string = readFileSync(SIGIL_DOLLAR_SOURCE_PATH, 'utf8'),
): CompileResult {
  const input = {
    language: 'Solidity' as const,
    sources: { [SOURCE_UNIT]: { content: source } },
    settings: COMPILER_SETTINGS,
  };
  // solc-js is untyped: its standard-JSON interface takes and returns JSON text.
  const compile = solc.compile as (json: string) => string;
  const output = outputSchema.parse(JSON.parse(compile(JSON.stringify(input))));
  const diagnostics = output.errors ?? [];
  const describe = (d: z.infer<typeof diagnosticSchema>) => d.formattedMessage ?? d.message;
  const errors = diagnostics.filter((d) => d.severity === 'error').map(describe);
  if (errors.length > 0) throw new Error(`SigilDollar.sol does not compile:\n${errors.join('\n')}`);
  const contract = output.contracts?.[SOURCE_UNIT]?.SigilDollar;
  if (!contract) throw new Error('solc returned no SigilDollar contract');
  const artifact: SigilDollarArtifact = {
    contractName: 'SigilDollar',
    sourcePath: relative(fileURLToPath(new URL('..', import.meta.url)), SIGIL_DOLLAR_SOURCE_PATH),
    sourceSha256: sha256(source),
    compiler: {
      name: 'solc',
      version: solc.version() as string,
      input: { language: 'Solidity', settings: COMPILER_SETTINGS },
    },
    abi: contract.abi as unknown as Abi,
    bytecode: `0x${contract.evm.bytecode.object}` as Hex,
    deployedBytecode: `0x${contract.evm.deployedBytecode.object}` as Hex,
  };
  return { artifact, warnings: diagnostics.filter((d) => d.severity !== 'error').map(describe) };
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The artifact as committed: JSON in the repository's prettier style, so `npm run lint` accepts it. */
export async function formatArtifact(artifact: SigilDollarArtifact): Promise<string> {
  const options = await prettier.resolveConfig(SIGIL_DOLLAR_ARTIFACT_PATH);
  return prettier.format(JSON.stringify(artifact), { ...options, filepath: SIGIL_DOLLAR_ARTIFACT_PATH });
}

async function main(): Promise<void> {
  const { artifact, warnings } = compileSigilDollar();
  for (const warning of warnings) process.stderr.write(`${warning}\n`);
  writeFileSync(SIGIL_DOLLAR_ARTIFACT_PATH, await formatArtifact(artifact));
  process.stdout.write(
    `${relative(process.cwd(), SIGIL_DOLLAR_ARTIFACT_PATH)}: solc ${artifact.compiler.version}, ` +
      `${(artifact.deployedBytecode.length - 2) / 2} bytes deployed\n`,
  );
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) await main();
