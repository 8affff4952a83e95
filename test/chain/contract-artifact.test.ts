import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { eip3009ABI } from '@x402/evm';
import type { AbiFunction } from 'viem';
import { compileSigilDollar, formatArtifact, sha256, type CompileResult } from '../../contracts/compile.ts';
import {
  readSigilDollarArtifact,
  SIGIL_DOLLAR_ARTIFACT_PATH,
  SIGIL_DOLLAR_SOURCE_PATH,
} from '../../contracts/sigil-dollar.ts';

const STALE = 'contracts/SigilDollar.json is stale: run `npm run contracts` and commit the result';

describe('SigilDollar artifact', function () {
  // solc-js (WebAssembly) takes a few seconds to load and compile.
  this.timeout(60_000);
  let compiled: CompileResult;
  const committed = readSigilDollarArtifact();

  before(() => {
    compiled = compileSigilDollar();
  });

  it('is what solc compiles from the committed source, with the recorded compiler and settings', () => {
    const { artifact } = compiled;
    expect(committed.sourceSha256, STALE).to.equal(sha256(readFileSync(SIGIL_DOLLAR_SOURCE_PATH, 'utf8')));
    expect(committed.compiler, STALE).to.deep.equal(artifact.compiler);
    expect(committed.abi, STALE).to.deep.equal(artifact.abi);
    expect(committed.bytecode, STALE).to.equal(artifact.bytecode);
    expect(committed.deployedBytecode, STALE).to.equal(artifact.deployedBytecode);
    expect(committed).to.deep.equal(artifact);
  });

  it('compiles without warnings', () => {
    expect(compiled.warnings).to.deep.equal([]);
  });

  it('is committed exactly as `npm run contracts` writes it (prettier-formatted JSON)', async () => {
    expect(readFileSync(SIGIL_DOLLAR_ARTIFACT_PATH, 'utf8'), STALE).to.equal(
      await formatArtifact(compiled.artifact),
    );
  });

  it('changes with any edit of the source, even a comment (the metadata hash covers it)', () => {
    const source = readFileSync(SIGIL_DOLLAR_SOURCE_PATH, 'utf8');
    const edited = compileSigilDollar(`${source}\n// an edit\n`).artifact;
    expect(edited.deployedBytecode).to.not.equal(committed.deployedBytecode);
    expect(edited.sourceSha256).to.not.equal(committed.sourceSha256);
  });

  it('has every function of x402’s EIP-3009 ABI, both transferWithAuthorization overloads included', () => {
    // Name, parameter types, mutability and return types: what a caller's encoding and decoding rely on.
    const shape = (f: AbiFunction) =>
      `${f.name}(${f.inputs.map((p) => p.type).join(',')}) ${f.stateMutability} returns (${f.outputs.map((p) => p.type).join(',')})`;
    const ours = committed.abi.filter((item): item is AbiFunction => item.type === 'function').map(shape);
    const x402 = (eip3009ABI as readonly AbiFunction[]).map(shape);
    expect(x402).to.include.members([
      'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32) nonpayable returns ()',
      'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes) nonpayable returns ()',
    ]);
    expect(ours).to.include.members(x402);
    expect(ours).to.include.members([
      'receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32) nonpayable returns ()',
      'receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes) nonpayable returns ()',
      'cancelAuthorization(address,bytes32,uint8,bytes32,bytes32) nonpayable returns ()',
      'cancelAuthorization(address,bytes32,bytes) nonpayable returns ()',
      'authorizationState(address,bytes32) view returns (bool)',
      'mint(address,uint256) nonpayable returns ()',
      'decimals() view returns (uint8)',
    ]);
  });
});
