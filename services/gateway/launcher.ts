import { Client } from '@modelcontextprotocol/sdk/client/index.js';
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
import { ProcessStdioTransport } from '../../core/mcp/process-transport.ts';
import type { PluginHost } from '../../core/plugins/host.ts';
import { SIGIL_VERSION } from '../shared/health.ts';
import type { CatalogEntry } from './catalog.ts';
import type { RunningServer, ServerKey } from './server-pool.ts';
import type { ProbeResult, ServerProber } from './servers.ts';

/** Longest line a server may send: well above any sane tool result, far below memory trouble. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
const CONNECT_TIMEOUT_MS = 30_000;
/** The end of a failed start's stderr quoted in its error: enough for the last lines of a stack trace. */
const STDERR_IN_ERROR_CHARS = 500;

/**
 * A process to start: whose it is, the catalog entry its call was admitted with (servers.ts), and the
 * version and digest its verification pinned, which is exactly what runs.
 */
export interface ServerLaunch extends ServerKey {
  entry: CatalogEntry;
  pin: ResolvedPackage;
}

/** Why a verification refused a pinned version: the registry now gives it another digest. */
export const PIN_MOVED = 'pin_moved';

export interface LauncherOptions {
  plugins: PluginHost;
  logger: Logger;
  /** The wallet's stored secrets for a server (decrypted), or nothing for an anonymous caller. */
  secretsFor(key: ServerKey): Promise<Record<string, string>>;
  /** Log lines scrub a process's secrets while it runs (from before it starts until it has ended). */
  registry: SecretRegistry;
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

  /** Starts the entry's pinned server in the sandbox, with the wallet's secrets, and connects an MCP client. */
  launch = (target: ServerLaunch): Promise<RunningServer> =>
    this.install(target.entry, target.pin).then((installed) =>
      this.start(target, target.entry, installed, true),
    );

  private async start(
    key: ServerKey,
    entry: CatalogEntry,
    installed: InstalledServer,
    withSecrets: boolean,
  ): Promise<RunningServer> {
    // A verification probe runs with no wallet and so with no secrets: many servers list tools without them.
    const secrets = withSecrets ? await this.declaredSecrets(key, entry) : {};
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
        { names: Object.keys(secrets), redactor },
        release,
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
  ): Promise<RunningServer> {
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
    let endedByItself = false;
    // Its stdout ends as it exits, before the sandbox reports the exit (after cleaning up).
    const ended = () => (endedByItself = true);
    child.stdout.once('end', ended);
    void child.exited.then(ended);
    const stderrTail: string[] = [];
    const transport = new ProcessStdioTransport(child, {
      maxMessageBytes: MAX_MESSAGE_BYTES,
      onStderr: (chunk) => {
        stderrTail.push(chunk.toString('utf8'));
        if (stderrTail.length > 20) stderrTail.shift();
      },
    });
    const client = new Client({ name: 'sigil-gateway', version: SIGIL_VERSION });
    try {
      await client.connect(transport, { timeout: CONNECT_TIMEOUT_MS });
    } catch (err) {
      // Read before the kill below, which ends the process whatever it was doing.
      const exitedFirst = endedByItself;
      await child.kill();
      const exit = await child.exited;
      // Redacted before it is cut: a cut could leave part of a secret that no longer matches whole.
      const stderr = injected.redactor.text(stderrTail.join(''));
      this.options.logger.warn(
        { serverId: key.serverId, exit, stderr: stderr.slice(-2000) },
        'MCP server failed to start',
      );
      // The server's own answer (an error to initialize) may quote its secrets.
      const why = injected.redactor.text(
        exit.reason ?? (exitedFirst ? exitedBeforeHandshake(exit, stderr) : (err as Error).message),
      );
      throw new SigilError('unavailable', `MCP server "${key.serverId}" did not start: ${why}`, {
        details: { serverId: key.serverId },
      });
    }
    void child.exited.then(release, release);
    return {
      client,
      callTool: (name, args, options) => callTool(transport, name, args, options),
      exited: child.exited,
      kill: () => client.close(),
      injected,
    };
  }

  /**
   * Only the secrets the catalog declares reach the process, as environment variables (never files).
   * A required one that is missing stops the start with a message naming it and how to set it.
   */
  private async declaredSecrets(key: ServerKey, entry: CatalogEntry): Promise<Record<string, string>> {
    const stored = entry.secrets.length === 0 ? {} : await this.options.secretsFor(key);
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
    return Object.fromEntries(
      entry.secrets
        .filter((secret) => stored[secret.name] !== undefined)
        .map((secret) => [secret.name, stored[secret.name] as string]),
    );
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
    const server = await this.start({ serverId: entry.id, wallet: 'warmup' }, entry, installed, false);
    try {
      const tools: Tool[] = [];
      let cursor: string | undefined;
      do {
        const page = await server.client.listTools(cursor === undefined ? {} : { cursor });
        tools.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor !== undefined);
      let smoke: ProbeResult['smoke'] = 'skipped';
      if (entry.smokeTest) {
        const result = await server.client
          .callTool({ name: entry.smokeTest.tool, arguments: entry.smokeTest.arguments })
          .catch(() => ({ isError: true }));
        smoke = result.isError ? 'failed' : 'passed';
      }
      return {
        version: installed.version,
        digest: installed.digest,
        hasInstallScripts: installed.hasInstallScripts,
        tools,
        smoke,
      };
    } finally {
      await server.kill();
    }
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
