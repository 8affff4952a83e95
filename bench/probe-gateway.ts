/**
 * What the gateway benchmarks share: the probe MCP server (published to a local verdaccio by each
 * suite), a work directory the sandbox user can read, a catalog holding only the probe, and a gateway
 * config that installs it from that registry into a sandbox.
 */
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { probeEntry } from '../test/services/gateway/support.ts';
import type { ConfigOverrides } from '../test/support/kernel.ts';

export const probePackage = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  'test',
  'fixtures',
  'mcp',
  'probe-package',
);

/** A fresh work directory with the probe's catalog in it. */
export function probeWorkDir(prefix: string): { dir: string; catalogFile: string } {
  // Not under /tmp: the sandbox mounts a private /tmp over it, hiding a package cache there.
  const dir = mkdtempSync(join('/var/tmp', prefix));
  chmodSync(dir, 0o755); // the sandbox user must reach the package cache
  const catalogFile = join(dir, 'catalog.json');
  writeFileSync(
    catalogFile,
    JSON.stringify({
      servers: [{ id: 'probe', ...probeEntry }],
    }),
  );
  return { dir, catalogFile };
}

/**
 * A gateway (port picked by the OS, no warmup, no default catalog) serving the probe from `registryUrl`,
 * its package cache and sandbox state under `dir` with `suffix`, and `plugins` added.
 */
export function probeGatewayConfig(options: {
  dir: string;
  catalogFile: string;
  registryUrl: string;
  suffix?: string;
  gateway?: ConfigOverrides['gateway'];
  plugins?: NonNullable<ConfigOverrides['plugins']>;
}): ConfigOverrides {
  const { dir, suffix = '' } = options;
  return {
    gateway: {
      port: 0,
      warmupAtStart: false,
      includeDefaultCatalog: false,
      catalogFile: options.catalogFile,
      // The load generators are one client (one address, or one wallet) with up to 200 calls in flight.
      callLimits: {
        perWallet: 1000,
        perAnonymousClient: 1000,
        queueLength: 64,
        queueWaitSeconds: 10,
      },
      // …over as many connections, beyond the per-client cap (128) that would close the rest.
      http: { maxConnectionsPerClient: 0 },
      ...options.gateway,
    },
    plugins: [
      { resolve: 'tee-none', enabled: true, options: {} },
      {
        resolve: 'registry-npm',
        enabled: true,
        options: {
          registry: options.registryUrl,
          cacheDir: join(dir, `packages${suffix}`),
        },
      },
      {
        resolve: 'sandbox-linux-namespaces',
        enabled: true,
        options: { stateDir: join(dir, `sandboxes${suffix}`) },
      },
      ...(options.plugins ?? []),
    ],
  };
}
