import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type Router from '@koa/router';
import { expect } from 'chai';
import type Koa from 'koa';
import { PLUGIN_KINDS } from '@sigil/plugin-api';
import { latestKit } from '@sigil/plugin-api/kit';
import { configSettings, pluginSettings } from '../../docs/config-reference.ts';
import { contractInterface, readSourceDocs } from '../../docs/contract-source.ts';
import { kitChecks } from '../../docs/plugin-kind-page.ts';
import { DOCS_DIR, generatedDocs } from '../../docs/generate.ts';
import { createGatewayApp } from '../../services/gateway/app.ts';
import { gatewayOpenApi } from '../../services/gateway/openapi.ts';
import type { Kernel } from '../../services/kernel.ts';
import { createRuntimeApp } from '../../services/runtime/app.ts';
import { runtimeOpenApi } from '../../services/runtime/openapi.ts';
import { openApiPath } from '../../services/shared/openapi.ts';
import { openTestKernel } from '../support/kernel.ts';

/** Every `METHOD /path` a Koa app's routers serve, read from @koa/router's stack (HEAD rides on GET). */
function registeredRoutes(app: Koa): string[] {
  const routes = new Set<string>();
  for (const middleware of app.middleware) {
    const router = (middleware as { router?: Router }).router;
    for (const layer of router?.stack ?? []) {
      for (const method of layer.methods) {
        if (method !== 'HEAD') routes.add(`${method} ${openApiPath(String(layer.path))}`);
      }
    }
  }
  return [...routes].sort();
}

/** Every `METHOD /path` an OpenAPI document describes. */
function documentedRoutes(document: Record<string, unknown>): string[] {
  const paths = document.paths as Record<string, Record<string, unknown>>;
  return Object.entries(paths).flatMap(([path, operations]) =>
    Object.keys(operations).map((method) => `${method.toUpperCase()} ${path}`),
  );
}

describe('generated docs', () => {
  it('docs/configuration.md, docs/openapi-*.json and docs/plugins/*.md are what `npm run docs` writes', async () => {
    for (const [name, text] of Object.entries(await generatedDocs())) {
      const committed = await readFile(join(DOCS_DIR, name), 'utf8');
      expect(committed, `docs/${name} is stale: run npm run docs and commit it`).to.equal(text);
    }
  });

  it('writes a page for every plugin kind, and docs/plugins.md links each', async () => {
    const pages = Object.keys(await generatedDocs()).filter((name) => name.startsWith('plugins/'));
    expect(pages).to.deep.equal(PLUGIN_KINDS.map((kind) => `plugins/${kind}.md`));
    const index = await readFile(join(DOCS_DIR, 'plugins.md'), 'utf8');
    for (const page of pages) expect(index).to.include(`](${page})`);
  });

  it('documents every member of every plugin contract in its doc comments', () => {
    const undocumented = PLUGIN_KINDS.flatMap((kind) => {
      const contract = contractInterface(readSourceDocs(latestKit(kind).contractFile));
      return [contract, ...contract.members]
        .filter((documented) => documented.doc === '')
        .map((documented) => `${kind}: ${documented.name}`);
    });
    expect(undocumented, 'add a doc comment to these in packages/plugin-api/src/contracts/').to.deep.equal(
      [],
    );
  });

  it('finds every phrase a kit check quotes in the doc comments of the file the check names', () => {
    const checks = PLUGIN_KINDS.flatMap((kind) => {
      const { plugin, behaviour } = kitChecks(kind);
      return [...plugin, ...behaviour];
    });
    // Quotes leave out code marks and line breaks, and elide with … between the parts they keep.
    const plain = (text: string) => text.replace(/`/g, '').replace(/\s+/g, ' ').trim().toLowerCase();
    const misquoted = checks.flatMap((check) => {
      const [, file = '', rest = ''] = /^(packages\/\S+?\.ts)[,:] (.*)$/.exec(check.spec) ?? [];
      const said = file ? plain(readSourceDocs(file).prose) : '';
      return [...rest.matchAll(/"([^"]+)"/g)]
        .flatMap(([, quote = '']) => quote.split('…'))
        .map((part) => plain(part).replace(/^[\s,;:.]+|[\s,;:.]+$/g, ''))
        .filter((part) => part !== '' && !said.includes(part))
        .map((part) => `${check.id}: "${part}" is not in ${file || 'any file (the spec names none)'}`);
    });
    expect(misquoted).to.deep.equal([]);
  });

  it('describes every setting of the config schema', () => {
    const undescribed = configSettings()
      .filter((setting) => !setting.description)
      .map((setting) => setting.path);
    expect(
      undescribed,
      'add .describe() to these settings in their config schema (core/config/, services/**/config.ts)',
    ).to.deep.equal([]);
  });

  it("states each number setting's range as its schema does: above 0 for positive(), from the next integer for an integer", async () => {
    const linux = (await pluginSettings()).find((plugin) => plugin.name === 'sandbox-linux-namespaces');
    const typeOf = (path: string) => linux?.settings.find((setting) => setting.path === path)?.type;
    expect(typeOf('cpuQuota')).to.equal('number > 0');
    expect(typeOf('cpuBurst')).to.equal('number 0–1');
    expect(typeOf('spares.keepSeconds')).to.equal('integer ≥ 1');
    expect(typeOf('spares.count')).to.equal('integer 0–256');
  });

  describe('the OpenAPI documents cover every route', () => {
    let kernel: Kernel;
    before(async () => {
      kernel = await openTestKernel({
        config: { plugins: [{ resolve: 'tee-none', enabled: true, options: {} }] },
      });
    });
    after(() => kernel.close());

    /** Builds a service's app, and checks its document names each of its routes (`sample` among them). */
    async function expectEveryRouteDocumented(
      app: { app: Koa; close(): Promise<void> | void },
      document: Record<string, unknown>,
      sample: string,
    ): Promise<void> {
      try {
        const routes = registeredRoutes(app.app);
        expect(routes).to.include(sample);
        expect(documentedRoutes(document)).to.include.members(routes);
      } finally {
        await app.close();
      }
    }

    it('of the gateway', () =>
      expectEveryRouteDocumented(
        createGatewayApp(kernel),
        gatewayOpenApi(kernel.config.gateway),
        'POST /api/secrets/{serverId}',
      ));

    it('each service serves its own document: the runtime at /openapi.json, the gateway at /api/openapi.json', async () => {
      for (const [app, path, document] of [
        [await createRuntimeApp(kernel), '/openapi.json', runtimeOpenApi(kernel.config.runtime)],
        [createGatewayApp(kernel), '/api/openapi.json', gatewayOpenApi(kernel.config.gateway)],
      ] as const) {
        const server = createServer(app.app.callback());
        try {
          await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
          const { port } = server.address() as AddressInfo;
          const served = await fetch(`http://127.0.0.1:${port}${path}`);
          expect(served.status).to.equal(200);
          expect(await served.json()).to.deep.equal(JSON.parse(JSON.stringify(document)));
        } finally {
          server.close();
          await app.close();
        }
      }
    });

    it('of the runtime', async () =>
      expectEveryRouteDocumented(
        await createRuntimeApp(kernel),
        runtimeOpenApi(kernel.config.runtime),
        'POST /agents/{id}/sessions/{sessionId}/messages',
      ));
  });
});
