import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { eip3009ABI } from '@x402/evm';
import type { AbiFunction } from 'viem';
import { readContractArtifact } from '../../solidity/artifact.ts';
import {
  CONTRACTS,
  compileContract,
  formatArtifact,
  sha256,
  type CompileResult,
} from '../../solidity/compile.ts';
import { readMiniMulticall3Artifact } from '../../solidity/mini-multicall3.ts';
import { readSigilDollarArtifact } from '../../solidity/sigil-dollar.ts';

/** Name, parameter types, mutability and return types: what a caller's encoding and decoding rely on. */
function shape(f: AbiFunction): string {
  const type = (p: AbiFunction['inputs'][number]): string =>
    'components' in p && p.components
      ? `(${p.components.map(type).join(',')})${p.type.slice('tuple'.length)}`
      : p.type;
  return `${f.name}(${f.inputs.map(type).join(',')}) ${f.stateMutability} returns (${f.outputs.map(type).join(',')})`;
}

for (const contract of CONTRACTS) {
  const STALE = `solidity/${contract.contractName}.json is stale: run \`npm run solidity\` and commit the result`;

  describe(`${contract.contractName} artifact`, function () {
    // solc-js (WebAssembly) takes a few seconds to load and compile.
    this.timeout(60_000);
    let compiled: CompileResult;
    const committed = readContractArtifact(contract);

    before(() => {
      compiled = compileContract(contract);
    });

    it('is what solc compiles from the committed source, with the recorded compiler and settings', () => {
      const { artifact } = compiled;
      expect(committed.sourceSha256, STALE).to.equal(sha256(readFileSync(contract.sourcePath, 'utf8')));
      expect(committed.compiler, STALE).to.deep.equal(artifact.compiler);
      expect(committed.abi, STALE).to.deep.equal(artifact.abi);
      expect(committed.bytecode, STALE).to.equal(artifact.bytecode);
      expect(committed.deployedBytecode, STALE).to.equal(artifact.deployedBytecode);
      expect(committed).to.deep.equal(artifact);
    });

    it('compiles without warnings', () => {
      expect(compiled.warnings).to.deep.equal([]);
    });

    it('is committed exactly as `npm run solidity` writes it (prettier-formatted JSON)', async () => {
      expect(readFileSync(contract.artifactPath, 'utf8'), STALE).to.equal(
        await formatArtifact(compiled.artifact, contract.artifactPath),
      );
    });

    it('changes with any edit of the source, even a comment (the metadata hash covers it)', () => {
      const source = readFileSync(contract.sourcePath, 'utf8');
      const edited = compileContract(contract, `${source}\n// an edit\n`).artifact;
      expect(edited.deployedBytecode).to.not.equal(committed.deployedBytecode);
      expect(edited.sourceSha256).to.not.equal(committed.sourceSha256);
    });
  });
}

describe('SigilDollar interface', () => {
  const committed = readSigilDollarArtifact();

  it('has every function of x402’s EIP-3009 ABI, both transferWithAuthorization overloads included', () => {
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

describe('MiniMulticall3 interface', () => {
  it('is Multicall3’s tryAggregate, as x402’s facilitator encodes and decodes it, with no constructor', () => {
    const committed = readMiniMulticall3Artifact();
    const functions = committed.abi.filter((item): item is AbiFunction => item.type === 'function');
    expect(functions.map(shape)).to.deep.equal([
      'tryAggregate(bool,(address,bytes)[]) payable returns ((bool,bytes)[])',
    ]);
    // Its runtime bytecode is placed with anvil_setCode: no constructor ever runs.
    expect(committed.abi.some((item) => item.type === 'constructor')).to.equal(false);
  });
});
