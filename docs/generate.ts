import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as prettier from 'prettier';
import { PLUGIN_KINDS } from '@sigil/plugin-api';
import { configSchema } from '../services/config.ts';
import { gatewayOpenApi } from '../services/gateway/openapi.ts';
import { runtimeOpenApi } from '../services/runtime/openapi.ts';
import { workflowJsonSchema } from '../services/runtime/canvas/document.ts';
import { configurationPage } from './configuration-page.ts';
import { pluginKindPage } from './plugin-kind-page.ts';

export const DOCS_DIR = dirname(fileURLToPath(import.meta.url));

/**
 * The documents generated from the schemas and the plugin API's sources, by path under docs/,
 * formatted as the repository's Prettier config formats them (so `npm run lint` accepts them as
 * written).
 */
export async function generatedDocs(): Promise<Record<string, string>> {
  const defaults = configSchema.parse({});
  const raw: Record<string, string> = {
    'configuration.md': await configurationPage(),
    'openapi-gateway.json': JSON.stringify(gatewayOpenApi(defaults.gateway)),
    'openapi-runtime.json': JSON.stringify(runtimeOpenApi(defaults.runtime)),
    'canvas-workflow.schema.json': JSON.stringify(workflowJsonSchema()),
  };
  for (const kind of PLUGIN_KINDS) raw[`plugins/${kind}.md`] = await pluginKindPage(kind);
  const formatted: Record<string, string> = {};
  for (const [name, text] of Object.entries(raw)) {
    const filepath = join(DOCS_DIR, name);
    const options = await prettier.resolveConfig(filepath);
    formatted[name] = await prettier.format(text, { ...options, filepath });
  }
  return formatted;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const [name, text] of Object.entries(await generatedDocs())) {
    await mkdir(dirname(join(DOCS_DIR, name)), { recursive: true });
    await writeFile(join(DOCS_DIR, name), text);
    process.stdout.write(`wrote docs/${name}\n`);
  }
}
