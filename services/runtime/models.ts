import { SigilError } from '@sigil/plugin-api';
import type { PluginHost } from '../../core/plugins/host.ts';

/** The ids of the models the loaded `llm-provider` plugins offer, in plugin order. */
export async function offeredModels(plugins: Pick<PluginHost, 'all'>): Promise<string[]> {
  const lists = await Promise.all(plugins.all('llm-provider').map((provider) => provider.listModels()));
  return lists.flat().map((model) => model.id);
}

/** How a caller finds a model that works: the offered ones, or why there are none. */
export const offeredModelsHint = (offered: readonly string[]): string =>
  offered.length > 0
    ? `Use one of the offered models (details.offered): ${offered.join(', ')}`
    : 'No llm-provider plugin is loaded: the operator adds one (e.g. provider-local) to plugins';

/** The refusal of an agent whose model no loaded provider offers: nothing is stored. */
export const modelNotOffered = (model: string, offered: readonly string[]): SigilError =>
  new SigilError('invalid_request', `Model "${model}" is not offered by any provider here`, {
    hint: offeredModelsHint(offered),
    details: { reason: 'model_not_offered', field: 'body.model', model, offered },
  });
