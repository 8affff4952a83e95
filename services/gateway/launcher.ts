import type { Client, Transport as ClientTransport } from '@modelcontextprotocol/client';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import {
  type EntryPoint,
  extensionPoints,
  type InstalledServer,
  isSigilError,
  type PackageRegistryV2,
  Redactor,
  type ResolvedPackage,
  type SandboxRuntimeV2,
  SigilError,
} from '@sigil/plugin-api';
import type { Logger, SecretRegistry } from '../../core/log.ts';
import { callTool } from '../../core/mcp/call-tool.ts';
import { ModernEnvelopes, protocolOf, type McpProtocol } from '../../core/mcp/era.ts';
import { mcpClientModule } from '../../core/mcp/warm-schemas.ts';
import { ProcessStdioTransport } from '../../core/mcp/process-transport.ts';
import type { PluginHost } from '../../core/plugins/host.ts';
import { SIGIL_VERSION } from '../shared/health.ts';
import type { CatalogEntry } from './catalog.ts';
import type { RunningServer, ServerKey } from './server-pool.ts';
import type { ProbeResult, ServerProber } from './servers.ts';

/** Longest line a server may send: well above any sane tool result, far below memory trouble. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
const CONNECT_TIMEOUT_MS = 30_000;
/** The protocol of a server whose verification recorded none (verified before eras were probed). */
const LEGACY: McpProtocol = Object.freeze({ era: 'legacy', version: '2025-11-25' });
/** The `details.reason` of a start whose process refused the handshake of its recorded era. */
export const ERA_REFUSED = 'era_refused';
/** The end of a failed start's stderr quoted in its error: enough for the last lines of a stack trace. */
const STDERR_IN_ERROR_CHARS = 500;

/**
 * A process to start: whose it is, the catalog entry its call was admitted with (servers.ts), and the
 * version and digest its verification pinned, which is exactly what runs.
 */
export interface ServerLaunch extends ServerKey {
  entry: CatalogEntry;
  pin: ResolvedPackage;
  /** The protocol its verification found; none (verified before eras were probed) is legacy. */
  protocol: McpProtocol | undefined;
}

/** Why a verification refused a pinned version: the registry now gives it another digest. */
export const PIN_MOVED = 'pin_moved';

export interface LauncherOptions {
  plugins: PluginHost;
  logger: Logger;
  /**
   * The wallet's stored secrets for a server (decrypted) and their version, or no values and no
   * version for an anonymous caller.
   */
  secretsFor(key: ServerKey): Promise<{ values: Record<string, string>; version?: number }>;
  /** Log lines scrub a process's secrets while it runs (from before it starts until it has ended). */
  registry: SecretRegistry;
  /**
   * How long a verification waits for the answer to `server/discover` before taking the server for a
   * legacy one that ignores unknown methods (once per pinned version: later starts know the era);
   * `gateway.mcp.probeTimeoutSeconds`.
   */
  probeTimeoutMs: number;
  /**
   * A pinned version's process refused the handshake of the protocol its verification recorded and
   * was probed again: `protocol` is what it speaks (to be recorded with the pin).
   */
  onProtocolChanged?(launch: ServerLaunch, protocol: McpProtocol): void;
}

/** How a start talks to its process first: the recorded protocol's handshake, or a probe for it. */
type Handshake = McpProtocol | 'probe';

/** A started server, and the SDK client connected to it (which verification lists its tools with). */
interface Started {
  server: RunningServer;
  client: Client;
}

/** A spawned process, its stdio transport, and what it said on stderr. */
interface Spawned {
  child: Awaited<ReturnType<SandboxRuntimeV2['spawn']>>;
  transport: ProcessStdioTransport;
  stderrTail: string[];
  /** Whether it ended on its own (its stdout ended, or it exited), not by a kill. */
  endedByItself(): boolean;
}

/**
 * Turns catalog entries into running MCP servers: the package from its registry plugin, the process
 * from the sandbox plugin, and an SDK client over the process's stdio.
 */
export class SandboxedServers implements ServerProber {
  private readonly installs = new Map<string, Promise<InstalledServer>>();

  constructor(private readonly options: LauncherOptions) {}

  runnable(entry: CatalogEntry): { ok: true } | { ok: false; reason: string } {
    if (!this.registryFor(entry))
      return { ok: false, reason: `no package-registry plugin for "${entry.registry}" is loaded` };
    if (this.options.plugins.all('sandbox-runtime').length === 0)
      return { ok: false, reason: 'no sandbox-runtime plugin is loaded' };
    return { ok: true };
  }

  /**
   * Starts the entry's pinned server in the sandbox, with the wallet's secrets, and connects an MCP
   * client at the protocol its verification recorded, without probing. A process that refuses that
   * protocol's handshake is probed once, on a fresh process, and the protocol found is reported.
   */
  launch = async (target: ServerLaunch): Promise<RunningServer> => {
    const installed = await this.install(target.entry, target.pin);
    const recorded = target.protocol ?? LEGACY;
    try {
      return (await this.start(target, target.entry, installed, true, recorded)).server;
    } catch (err) {
      if (!isSigilError(err) || err.details?.reason !== ERA_REFUSED) throw err;
      const { server } = await this.start(target, target.entry, installed, true, 'probe');
      this.options.logger.warn(
        { serverId: target.serverId, recorded, found: server.protocol },
        'MCP server refused its recorded protocol; probed again',
      );
      this.options.onProtocolChanged?.(target, server.protocol);
      return server;
    }
  };

  private async start(
    key: ServerKey,
    entry: CatalogEntry,
    installed: InstalledServer,
    withSecrets: boolean,
    handshake: Handshake,
  ): Promise<Started> {
    // A verification probe runs with no wallet and so with no secrets: many servers list tools without them.
    const { values: secrets, version } = withSecrets
      ? await this.declaredSecrets(key, entry)
      : { values: {} };
    const env = { ...entry.env, ...secrets };
    // Every encoding of the secrets, computed once per process: each of its results is redacted with it.
    const redactor = Redactor.of(Object.values(secrets));
    const release = this.options.registry.hold(redactor);
    try {
      return await this.connect(
        key,
        entry,
        installed,
        env,
        { names: Object.keys(secrets), redactor, ...(version !== undefined && { version }) },
        release,
        handshake,
      );
    } catch (err) {
      release();
      throw err;
    }
  }

  private async connect(
    key: ServerKey,
    entry: CatalogEntry,
    installed: InstalledServer,
    env: Record<string, string>,
    injected: RunningServer['injected'],
    release: () => void,
    handshake: Handshake,
  ): Promise<Started> {
    const spawn = () => this.spawn(key, entry, installed, env);
    let spawned = await spawn();
    let client: Client;
    try {
      client = await this.handshake(spawned, handshake);
    } catch (err) {
      if (handshake !== 'probe' || !(await this.legacyAfterProbe(key, spawned, err))) {
        throw await this.failedStart(key, spawned, injected, err, handshake);
      }
      // Silent or gone on server/discover (or pinned to another modern revision): a legacy server,
      // on a fresh process, since this one may be stuck on the probe.
      spawned = await spawn();
      try {
        client = await this.handshake(spawned, LEGACY);
      } catch (retryErr) {
        throw await this.failedStart(key, spawned, injected, retryErr, LEGACY);
      }
    }
    const { child, transport } = spawned;
    void child.exited.then(release, release);
    const protocol = protocolOf(client.getNegotiatedProtocolVersion() ?? LEGACY.version);
    if (handshake === 'probe') {
      this.options.logger.info({ serverId: key.serverId, protocol }, 'MCP server protocol probed');
    }
    const envelopes =
      protocol.era === 'modern'
        ? new ModernEnvelopes(protocol.version, { name: 'sigil-gateway', version: SIGIL_VERSION })
        : undefined;
    const server: RunningServer = {
      protocol,
      callTool: (name, args, options) => callTool(transport, name, args, options, envelopes),
      exited: child.exited,
      kill: () => client.close(),
      injected,
    };
    return { server, client };
  }

  /** Starts a process of the entry in the sandbox, its stderr's end kept for the error of a failed start. */
  private async spawn(
    key: ServerKey,
    entry: CatalogEntry,
    installed: InstalledServer,
    env: Record<string, string>,
  ): Promise<Spawned> {
    const child = await this.sandboxFor(installed.launch)
      .then((sandbox) =>
        sandbox.spawn({
          launch: installed.launch,
          env,
          networkAllowList: entry.network,
          labels: { 'sigil.server': key.serverId },
        }),
      )
      .catch((err: unknown) => {
        throw this.pluginFailure(err, `Starting ${entry.id} in the sandbox`);
      });
    const stderrTail: string[] = [];
    const transport = new ProcessStdioTransport(child, {
      maxMessageBytes: MAX_MESSAGE_BYTES,
      onStderr: (chunk) => {
        stderrTail.push(chunk.toString('utf8'));
        if (stderrTail.length > 20) stderrTail.shift();
      },
    });
    let endedByItself = false;
    // Its stdout ends as it exits, before the sandbox reports the exit (after cleaning up). An SDK
    // client whose handshake failed closes the transport, which ends the process: not its own doing.
    const ended = () => (endedByItself ||= !transport.closedByCaller);
    child.stdout.once('end', ended);
    void child.exited.then(ended);
    return { child, transport, stderrTail, endedByItself: () => endedByItself };
  }

  /**
   * Connects the gateway's client to a fresh process: `initialize` (legacy), `server/discover` at the
   * recorded revision (modern, no fallback), or the probe (MCP 2026-07-28, "stdio"): `server/discover`
   * with the envelope, a DiscoverResult or -32022 naming a revision in common meaning modern, any
   * other answer legacy, `initialize` then following on the same process.
   */
  private async handshake({ transport }: Spawned, handshake: Handshake): Promise<Client> {
    const { Client } = await mcpClientModule(); // while the process starts
    const client = new Client(
      { name: 'sigil-gateway', version: SIGIL_VERSION },
      handshake === 'probe'
        ? { versionNegotiation: { mode: 'auto', probe: { timeoutMs: this.options.probeTimeoutMs } } }
        : handshake.era === 'modern'
          ? { versionNegotiation: { mode: { pin: handshake.version } } }
          : {},
    );
    // The SDK 2 transport contract, met by the SDK 1.x one it is written to (the same JSON-RPC messages).
    await client.connect(transport as unknown as ClientTransport, { timeout: CONNECT_TIMEOUT_MS });
    return client;
  }

  /**
   * Whether a failed probe says "legacy, on a fresh process": the process answered nothing (it ended
   * on the probe, or stayed silent past the probe's time), or refused the probe's revision for
   * another modern one only. The failed process is stopped.
   */
  private async legacyAfterProbe(
    key: ServerKey,
    { child, transport }: Spawned,
    err: unknown,
  ): Promise<boolean> {
    const { UnsupportedProtocolVersionError } = await mcpClientModule();
    if (transport.spoke && !(err instanceof UnsupportedProtocolVersionError)) return false;
    await child.kill();
    await child.exited;
    this.options.logger.info(
      { serverId: key.serverId, err: (err as Error).message },
      'MCP server did not answer server/discover: legacy, on a fresh process',
    );
    return true;
  }

  /**
   * Stops a process whose handshake failed and says why, as an operator can act on it: its exit and
   * stderr when it ended on its own, else the error (redacted: the server's answer may quote its
   * secrets). A process that answered, but refused the handshake of its recorded protocol, is
   * `ERA_REFUSED`: the launch probes it again.
   */
  private async failedStart(
    key: ServerKey,
    { child, stderrTail, transport, endedByItself }: Spawned,
    injected: RunningServer['injected'],
    err: unknown,
    handshake: Handshake,
  ): Promise<SigilError> {
    // Read before the kill below, which ends the process whatever it was doing.
    const exitedFirst = endedByItself();
    await child.kill();
    const exit = await child.exited;
    // Redacted before it is cut: a cut could leave part of a secret that no longer matches whole.
    const stderr = injected.redactor.text(stderrTail.join(''));
    this.options.logger.warn(
      { serverId: key.serverId, exit, stderr: stderr.slice(-2000) },
      'MCP server failed to start',
    );
    const why = injected.redactor.text(
      exit.reason ?? (exitedFirst ? exitedBeforeHandshake(exit, stderr) : (err as Error).message),
    );
    const refused = handshake !== 'probe' && transport.spoke && !exitedFirst;
    return new SigilError('unavailable', `MCP server "${key.serverId}" did not start: ${why}`, {
      details: { serverId: key.serverId, ...(refused && { reason: ERA_REFUSED }) },
    });
  }

  /**
   * Only the secrets the catalog declares reach the process, as environment variables (never files).
   * A required one that is missing stops the start with a message naming it and how to set it.
   */
  private async declaredSecrets(
    key: ServerKey,
    entry: CatalogEntry,
  ): Promise<{ values: Record<string, string>; version?: number }> {
    if (entry.secrets.length === 0) return { values: {} };
    const { values: stored, version } = await this.options.secretsFor(key);
    const missing = entry.secrets
      .filter((secret) => secret.required && stored[secret.name] === undefined)
      .map((secret) => secret.name);
    if (missing.length > 0) {
      throw new SigilError(
        'forbidden',
        `MCP server "${entry.id}" needs the secret${missing.length > 1 ? 's' : ''} ${missing.join(', ')}`,
        {
          hint: `Store ${missing.length > 1 ? 'them' : 'it'} for your wallet with POST /api/secrets/${entry.id} {"secrets": {"${missing[0] ?? ''}": "…"}} (wallet auth required)`,
          details: { serverId: entry.id, missingSecrets: missing },
        },
      );
    }
    const values = Object.fromEntries(
      entry.secrets
        .filter((secret) => stored[secret.name] !== undefined)
        .map((secret) => [secret.name, stored[secret.name] as string]),
    );
    return { values, ...(version !== undefined && { version }) };
  }

  /**
   * Resolves the entry's range anew, installs what it resolves to and lists its tools. A version that
   * `pinned` (the last verification's) holds with another digest is refused: the registry changed
   * it since it was verified (a moved tag, a republished file).
   */
  async probe(entry: CatalogEntry, pinned?: ResolvedPackage): Promise<ProbeResult> {
    const resolved = await this.resolve(entry);
    if (pinned && pinned.version === resolved.version && pinned.digest !== resolved.digest) {
      throw new SigilError(
        'conflict',
        `${entry.package}@${resolved.version} changed since it was pinned: the registry gives digest ${resolved.digest}, it was ${pinned.digest}`,
        {
          hint: 'A moved tag or a republished package: check it, then pin another version in the catalog',
          details: { serverId: entry.id, reason: PIN_MOVED },
        },
      );
    }
    const installed = await this.install(entry, resolved);
    const { server, client } = await this.start(
      { serverId: entry.id, wallet: 'warmup' },
      entry,
      installed,
      false,
      'probe',
    );
    try {
      // Every page (a modern server's with the envelope), fetched anew.
      const tools = (await client.listTools(undefined, { cacheMode: 'bypass' })).tools as unknown as Tool[];
      let smoke: ProbeResult['smoke'] = 'skipped';
      if (entry.smokeTest) {
        const result = await client
          .callTool({ name: entry.smokeTest.tool, arguments: entry.smokeTest.arguments })
          .catch(() => ({ isError: true }));
        smoke = result.isError ? 'failed' : 'passed';
      }
      return {
        version: installed.version,
        digest: installed.digest,
        hasInstallScripts: installed.hasInstallScripts,
        protocol: server.protocol,
        tools,
        smoke,
      };
    } finally {
      await server.kill();
    }
  }

  async prepare(entry: CatalogEntry, pin: ResolvedPackage): Promise<void> {
    await this.install(entry, pin);
  }

  /**
   * What a caller sees of a plugin's failure: its own SigilError, or, for anything else a plugin
   * throws (a third party's plain Error), `unavailable` naming the step. The plain error's text may
   * say anything, secrets included, so it goes to the log only.
   */
  private pluginFailure(err: unknown, step: string): SigilError {
    if (isSigilError(err)) return err;
    this.options.logger.error(
      { err, step },
      'gateway: a plugin failed with an error that is not a SigilError',
    );
    return new SigilError('unavailable', `${step} failed`, {
      hint: 'The gateway log has the plugin’s own error',
      details: { reason: 'plugin_failed' },
    });
  }

  private resolve(entry: CatalogEntry): Promise<ResolvedPackage> {
    return this.registryOf(entry)
      .resolve({ name: entry.package, range: entry.version })
      .catch((err: unknown) => {
        throw this.pluginFailure(err, `Resolving ${entry.package}@${entry.version} in ${entry.registry}`);
      });
  }

  /** Installs a pinned package once per process and entry point; the registry's cache makes later runs offline. */
  private install(entry: CatalogEntry, pin: ResolvedPackage): Promise<InstalledServer> {
    const entryPoint: EntryPoint = { ...entry.entry };
    const key = JSON.stringify([entry.registry, pin.name, pin.version, pin.digest, entryPoint]);
    let pending = this.installs.get(key);
    if (!pending) {
      pending = Promise.resolve()
        .then(() => this.registryOf(entry).install(pin, entryPoint))
        .catch((err: unknown) => {
          throw this.pluginFailure(err, `Installing ${pin.name}@${pin.version} from ${entry.registry}`);
        });
      pending.catch(() => this.installs.delete(key));
      this.installs.set(key, pending);
    }
    return pending;
  }

  private registryOf(entry: CatalogEntry): PackageRegistryV2 {
    const registry = this.registryFor(entry);
    if (!registry)
      throw new SigilError('unavailable', `No package-registry plugin for "${entry.registry}" is loaded`, {
        details: { serverId: entry.id, reason: 'unknown_registry' },
      });
    return registry;
  }

  /** The plugin that provides the entry's registry kind (extensionPoints.registryKinds). */
  private registryFor(entry: CatalogEntry): PackageRegistryV2 | undefined {
    return this.options.plugins.extensions(extensionPoints.registryKinds).get(entry.registry);
  }

  /**
   * The sandbox that runs a launch: the only one loaded, or else the first (in load order) whose
   * `status().runs` covers it, so an operator can keep host programs in one sandbox and run images in
   * the Docker engine. When none covers it, the first refuses it, saying why.
   */
  private async sandboxFor(launch: InstalledServer['launch']): Promise<SandboxRuntimeV2> {
    const [first, ...others] = this.options.plugins.all('sandbox-runtime');
    if (!first) throw new SigilError('unavailable', 'No sandbox-runtime plugin is loaded');
    if (others.length === 0) return first;
    for (const sandbox of [first, ...others]) {
      const { runs } = await sandbox.status();
      if (launch.kind === 'image' ? runs.image : runs.host.includes(launch.runtime)) return sandbox;
    }
    return first;
  }
}

/**
 * Why a process that ended on its own before the MCP handshake did not start: its exit and the end of
 * what it said on stderr (a missing module, a bad argument), rather than the failed write to its stdin.
 */
function exitedBeforeHandshake(exit: { code: number | null; signal: string | null }, stderr: string): string {
  const how = exit.signal === null ? `code ${String(exit.code)}` : `signal ${exit.signal}`;
  const said = stderr.trim().slice(-STDERR_IN_ERROR_CHARS);
  return `the process exited (${how}) before the MCP handshake${said ? `; stderr: ${said}` : ', saying nothing on stderr'}`;
}

/** What a verified server's verification pinned; `admit` lets no unverified server through. */
export function pinOf(details: {
  id: string;
  package: string;
  version: string | null;
  digest: string | null;
}): ResolvedPackage {
  if (details.version === null || details.digest === null)
    throw new SigilError('unavailable', `MCP server "${details.id}" has no verified version`);
  return { name: details.package, version: details.version, digest: details.digest };
}
