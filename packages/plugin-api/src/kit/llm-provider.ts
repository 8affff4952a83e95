import type { LlmProviderV1 } from '../index.ts';
import { ensure, pass } from './check.ts';
import type { ContractKit, InstanceCheck } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/**
 * `llm-provider` v1 kit: the contract's shape, and what any instance shows without a key: its priced
 * catalog and its key slot. Streaming, tool calls, cancellation and typed errors need an upstream and
 * keys that only a tester has: those checks are in llm-provider-behaviour.ts
 * (`describeLlmProviderBehaviour(load, harness)`), which the project's three providers pass against
 * the local stand-in.
 */

const CONTRACT = 'packages/plugin-api/src/contracts/llm-provider-v1.ts';

const priced: InstanceCheck<LlmProviderV1> = {
  id: 'llm-provider.models-priced',
  level: 'MUST',
  title:
    'listModels() lists at least one model, ids unique, prices integer base units (bigint, not negative)',
  spec: `${CONTRACT}: listModels, "at least one; ids unique"; LlmModelInfo prices "in base units (integer)"`,
  check: async ({ instance, evidence }) => {
    const models = await instance.listModels();
    ensure(Array.isArray(models), 'listModels() did not resolve to an array');
    evidence.note(
      'listModels()',
      models.map((model) => ({
        id: model.id,
        inputPricePerMTok: String(model.inputPricePerMTok),
        outputPricePerMTok: String(model.outputPricePerMTok),
      })),
    );
    ensure(models.length > 0, 'listModels() lists no model');
    const ids = new Set<string>();
    for (const model of models) {
      ensure(typeof model.id === 'string' && model.id !== '', 'a model has no id');
      ensure(!ids.has(model.id), `model ${model.id} is listed twice`);
      ids.add(model.id);
      for (const field of ['inputPricePerMTok', 'outputPricePerMTok'] as const) {
        const price: unknown = model[field];
        ensure(typeof price === 'bigint', `${model.id}.${field} is a ${typeof price}, not a bigint`);
        ensure(price >= 0n, `${model.id}.${field} is negative`);
      }
    }
    return pass();
  },
};

const keySlot: InstanceCheck<LlmProviderV1> = {
  id: 'llm-provider.key-slot',
  level: 'MUST',
  title: 'keySlot names a vault slot like an environment variable (PROVIDER_API_KEY, OPENAI_API_KEY…)',
  spec: `${CONTRACT}: keySlot`,
  check: async ({ instance, evidence }) => {
    evidence.note('keySlot', instance.keySlot);
    ensure(
      /^[A-Z][A-Z0-9_]*_API_KEY$/.test(instance.keySlot),
      `keySlot "${instance.keySlot}" is not an upper-case name ending in _API_KEY`,
    );
    return pass();
  },
};

export const llmProviderKit: ContractKit<'llm-provider', 'v1'> = {
  kind: 'llm-provider',
  specVersion: 'v1',
  contractFile: CONTRACT,
  members: { keySlot: 'string', listModels: 'function', doStream: 'function' },
  behaviour: [priced, keySlot],
};

export const describeLlmProviderKit = (load: () => Promise<LlmProviderV1>): void =>
  describeContractKit(llmProviderKit, load);
