import type Router from '@koa/router';
import type { Kernel } from '../kernel.ts';
import { SIGIL_VERSION } from '../shared/health.ts';
import { loadCatalog } from './catalog.ts';
import { SandboxedServers } from './launcher.ts';
import { McpDispatcher } from './mcp/dispatcher.ts';
import { mcpRouter } from './mcp/endpoint.ts';
import { GatewayTools } from './mcp/gateway-tools.ts';
import { gatewayOpenApi } from './openapi.ts';
import { restRouter } from './rest.ts';
import { ServerPool } from './server-pool.ts';
import { ServerDirectory } from './servers.ts';
import { EnabledServers } from './sessions.ts';
import { ToolCaller, type ToolCallHooks } from './tool-calls.ts';
import { ToolPins } from './tool-pins.ts';
import { Warmup } from './warmup.ts';

export interface ToolGateway {
  routers: Router[];
  warmup: Warmup;
  /** Stops every MCP server process. */
  close(): Promise<void>;
}

/** Assembles the gateway's MCP and REST surfaces over one catalog, one pool and one execution path. */
export function createToolGateway(kernel: Kernel, hooks: ToolCallHooks = {}): ToolGateway {
  const settings = kernel.config.gateway;
  const logger = kernel.logger.child({ component: 'tool-gateway' });
  const catalog = loadCatalog({
    includeDefaults: settings.includeDefaultCatalog,
    ...(settings.catalogFile ? { file: settings.catalogFile } : {}),
  });
  const launcher = new SandboxedServers({ plugins: kernel.plugins, catalog, logger });
  const servers = new ServerDirectory({
    db: kernel.db,
    clock: kernel.clock,
    logger,
    catalog,
    pins: new ToolPins(kernel.db, kernel.clock),
    prober: launcher,
    denyList: settings.denyList,
  });
  const pool = new ServerPool({
    launch: launcher.launch,
    idleMs: settings.idleTimeoutSeconds * 1000,
    maxRunning: settings.maxRunningServers,
    logger,
  });
  const caller = new ToolCaller({
    servers,
    pool,
    hooks,
    timeoutMs: settings.toolCallTimeoutSeconds * 1000,
    logger,
  });
  const tools = new GatewayTools({
    catalog,
    servers,
    enabled: new EnabledServers(kernel.db, kernel.clock),
    caller,
  });
  const dispatcher = new McpDispatcher(tools, {
    name: 'sigil-gateway',
    version: SIGIL_VERSION,
    instructions:
      'Discovery is opt-in: use gateway_search_servers, then gateway_enable_server; the server’s tools then appear as <serverId>__<tool>.',
  });
  const warmup = new Warmup({
    catalog,
    servers,
    registries: () => kernel.plugins.all('package-registry'),
    clock: kernel.clock,
    logger,
  });
  return {
    routers: [
      mcpRouter({
        dispatcher,
        bodyLimitBytes: settings.bodyLimitBytes,
        assertServerServable: async (serverId) => void (await servers.requireServable(serverId)),
      }),
      restRouter({ servers, caller, warmup, openApi: () => gatewayOpenApi(kernel) }),
    ],
    warmup,
    close: () => pool.stopAll(),
  };
}
