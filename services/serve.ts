import type { RequestListener } from 'node:http';
import { listen, type RunningServer } from '../core/http/server.ts';
// Types only: each service's app (and all it imports) is loaded when that service is served.
import type { GatewayApp } from './gateway/app.ts';
import type { WarmupOutcome } from './gateway/warmup.ts';
import type { Kernel } from './kernel.ts';
import { warmMcpClientSchemas } from '../core/mcp/warm-schemas.ts';
import { loadBuildInfo } from './shared/build-info.ts';
import type { RuntimeApp } from './runtime/app.ts';
import { requireReplicaSettings, settingsFingerprints } from './shared-deployment.ts';

export type ServiceName = 'runtime' | 'gateway';

/** A service's app, with optional background work to start once it listens and to stop before the kernel. */
interface ServiceApp {
  callback(): RequestListener;
  start?(): Promise<void> | void;
  /** Settles once its start-up work (the gateway's warmup) is done. */
  warmedUp?(): Promise<WarmupOutcome | undefined>;
  /** Shutdown begins: ends at once what need not wait for the in-flight requests' grace (streams). */
  closing?(): void;
  close?(): Promise<void>;
}

/** Composition order: a gateway served beside the runtime reads the runtime's keys and attestation directly. */
const SERVICE_ORDER: readonly ServiceName[] = ['runtime', 'gateway'];

export interface Serving {
  urls: Partial<Record<ServiceName, string>>;
  /** Settles once every service's start-up work is done, with the gateway's warmup if it ran one. */
  warmedUp: Promise<WarmupOutcome | undefined>;
  /**
   * Graceful: stop accepting, end the streams that can end at once (open canvas event streams, with a
   * `shutdown` event), let other in-flight requests finish, then stop plugins and close the database.
   */
  stop(): Promise<void>;
}

export async function serve(kernel: Kernel, services: readonly ServiceName[]): Promise<Serving> {
  const running: RunningServer[] = [];
  const apps: ServiceApp[] = [];
  const urls: Partial<Record<ServiceName, string>> = {};
  let runtime: RuntimeApp | undefined;
  let gateway: GatewayApp | undefined;
  const compose = async (name: ServiceName): Promise<ServiceApp> => {
    if (name === 'runtime') {
      const { createRuntimeApp } = await import('./runtime/app.ts');
      return (runtime = await createRuntimeApp(kernel));
    }
    const { createGatewayApp } = await import('./gateway/app.ts');
    return (gateway = createGatewayApp(kernel, runtime ? { inProcessRuntime: runtime.inProcess } : {}));
  };
  const served = SERVICE_ORDER.filter((service) => services.includes(service));
  // Before anything is composed: a replica missing what its peers need (keys, public URLs) never serves.
  await requireReplicaSettings(kernel, served);
  await kernel.replica.serving(served);
  try {
    for (const name of served) {
      const { host, port, http } = kernel.config[name];
      const service = await compose(name);
      apps.push(service);
      const server = await listen(service, host, port, http);
      running.push(server);
      await service.start?.();
      urls[name] = server.url;
      kernel.logger.info({ service: name, url: server.url }, `${name} listening`);
    }
    // Both here (sigil up): the runtime's tool loop reaches this gateway where it listens, ephemeral
    // ports included, unless runtime.chat.gatewayUrl names another address.
    if (runtime && urls.gateway && kernel.config.runtime.chat.gatewayUrl === undefined)
      runtime.gateway.reachAt(urls.gateway);
    if (kernel.replica.shared)
      await kernel.replica.agreeOn(await settingsFingerprints(kernel, { runtime, gateway }));
  } catch (err) {
    await Promise.all(running.map((server) => server.close(0)));
    await Promise.all(apps.map((service) => service.close?.()));
    throw err;
  }
  // In the background once listening: the code hash that proofs and attestation carry (from source,
  // ~570 files to hash), so the first tools/call does not compute it on its way.
  loadBuildInfo().catch((err: unknown) =>
    kernel.logger.warn({ err }, 'the build info could not be computed; asked again when needed'),
  );
  // The MCP SDK client's wire schemas, which its first request to an MCP server would build on the
  // first tools/call's way (20-30 ms of CPU): built on a later turn, after the listening line is out.
  if (gateway)
    warmMcpClientSchemas().catch((err: unknown) =>
      kernel.logger.warn({ err }, 'the MCP client schemas could not be built ahead'),
    );
  let stopping: Promise<void> | undefined;
  const warmedUp = Promise.all(apps.map((service) => service.warmedUp?.())).then((outcomes) =>
    outcomes.find((outcome) => outcome !== undefined),
  );
  return {
    urls,
    warmedUp,
    stop: () => {
      stopping ??= (async () => {
        // The servers stop accepting first; then the apps end the streams that need not wait.
        const drained = Promise.all(running.map((server) => server.close()));
        for (const service of apps) service.closing?.();
        await drained;
        await Promise.all(apps.map((service) => service.close?.()));
        await kernel.close();
      })();
      return stopping;
    },
  };
}
