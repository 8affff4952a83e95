import type { LlmProviderV1 } from '../../core/plugins/contracts/index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/** `llm-provider` v1 kit: for now the contract's shape; behaviour lands in `behaviour`. */
export const llmProviderKit: ContractKit<'llm-provider'> = {
  kind: 'llm-provider',
  contractFile: 'core/plugins/contracts/llm-provider-v1.ts',
  members: { listModels: 'function', doStream: 'function' },
  // Next, one check per promise of llm-provider-v1.ts, against a local stand-in of the provider's API:
  // - listModels() prices are integer base units (bigint), never floats;
  // - doStream() ends with one `finish` part and reports `usage`;
  // - doStream() stops promptly when `signal` aborts;
  // - upstream failures map to the LlmErrorKind values; `apiKey` never appears in an error.
  behaviour: [],
};

export const describeLlmProviderKit = (load: () => Promise<LlmProviderV1>): void =>
  describeContractKit(llmProviderKit, load);
