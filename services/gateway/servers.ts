import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { TtlCache } from '@sigil/plugin-api/cache';
import type { Clock } from '../../core/clock.ts';
import type { Database } from '../../core/db/database.ts';
import type { McpProtocol } from '../../core/mcp/era.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../core/log.ts';
import type { ServerCallSettings } from './call-limits.ts';
import type { Catalog, CatalogEntry } from './catalog.ts';
import type { QuarantinedTool, ToolPins } from './tool-pins.ts';
import { PIN_MOVED } from './launcher.ts';

export type VerificationTier = 'tools_listed' | 'tool_smoke_passed';

/** What a probe of a server found: its package identity and the tools it presented. */
export interface ProbeResult {
  version: string;
  digest: string;
  hasInstallScripts: boolean;
  /** The MCP protocol the server speaks, as its probe found it (core/mcp/era.ts). */
  protocol: McpProtocol;
  tools: Tool[];
  /** `passed` when the catalog's smoke tool answered without error; `skipped` when none is declared. */
  smoke: 'passed' | 'failed' | 'skipped';
}

/** Installs a server and lists its tools in a sandbox; a failure says why, in words for the operator. */
export interface ServerProber {
  /**
   * Resolves the entry anew and probes what it resolves to; refuses (reason `pin_moved`) a version
   * that `pinned`, the last verification's, holds with another digest.
   */
  probe(
    entry: CatalogEntry,
    pinned?: { name: string; version: string; digest: string },
  ): Promise<ProbeResult>;
  /** Whether this deployment can run servers of the entry's registry kind at all. */
  runnable(entry: CatalogEntry): { ok: true } | { ok: false; reason: string };
}

export interface FilterVerdict {
  status: 'allowed' | 'blocked' | 'unverified';
  reason: string | null;
}

export interface ServerDetails {
  id: string;
  title: string;
  description: string;
  registry: CatalogEntry['registry'];
  package: string;
  versionRange: string;
  version: string | null;
  digest: string | null;
  /**
   * The MCP protocol the verified version speaks (probed once, at verification; every start of it
   * uses this); null when not verified, or verified before protocols were probed (it runs at
   * 2025-11-25).
   */
  protocol: McpProtocol | null;
  filter: FilterVerdict;
  runnable: { ok: boolean; reason: string | null };
  tier: VerificationTier | null;
  verifiedAt: string | null;
  lastError: string | null;
  tools: Tool[];
  quarantinedTools: QuarantinedTool[];
  /**
   * Tools the server offers only as MCP tasks (`execution.taskSupport: 'required'`): a stateless
   * gateway cannot poll a task across requests, so they are not served.
   */
  taskOnlyTools: string[];
  secrets: { name: string; required: boolean; description: string }[];
  network: string[];
  /** The catalog's side-effect-free tool for probes (and conformance testers), if any. */
  smokeTool: string | null;
}

/**
 * One catalog server as a tool call needs it, resolved by one look-up of its id: how to start it, what
 * verification found (served tools, filter, runnability) and how its calls run. `admit` hands it to the
 * call path, which passes it on instead of looking the id up again.
 */
export interface ResolvedServer {
  entry: CatalogEntry;
  details: ServerDetails;
  settings: ServerCallSettings;
}

interface ServerRow {
  server_id: string;
  version: string | null;
  digest: string | null;
  tier: VerificationTier | null;
  filter_status: 'allowed' | 'blocked';
  filter_reason: string | null;
  verified_at: number | string | null;
  last_error: string | null;
  protocol_era: McpProtocol['era'] | null;
  protocol_version: string | null;
}

/**
 * How long a process trusts its in-memory copy of a server's details (verdict, tier, served and
 * quarantined tools) before reading the database again. Changes made through this process (a
 * verification, an approval, the quarantine a verification puts a tool in) replace the copy at once;
 * this bound is only how late a replica sees a change another replica made to the shared database.
 */
export const SERVER_DETAILS_TTL_MS = 2000;

/**
 * How old a failed verification must be before a call, an enable or a tool list tries it again: soon
 * after an operator fixed the cause (a registry or an engine back), not an install on every call of a
 * server that stays broken. A blocked package is never tried again on demand.
 */
export const RETRY_FAILED_VERIFICATION_MS = 30_000;

/**
 * The catalog as the gateway sees it at run time, and the one place that decides whether a server may
 * run (`admit`): each server's catalog entry, security filter verdict, runnability, verification tier,
 * served tools and call settings. Verdicts live in the database, so replicas agree on them; each
 * process keeps a short-lived copy, so a tool call does not read them on every request.
 */
export class ServerDirectory {
  private readonly inFlight = new Map<string, Promise<ResolvedServer>>();
  private readonly cache: TtlCache<string, ResolvedServer>;

  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      logger: Logger;
      catalog: Catalog;
      pins: ToolPins;
      prober: ServerProber;
      denyList: readonly string[];
      /** A catalog server's time limit, and whether anonymous callers may share its process. */
      callSettings(serverId: string): ServerCallSettings;
      /** Overrides {@link SERVER_DETAILS_TTL_MS}; 0 reads the database on every call. */
      detailsTtlMs?: number;
    },
  ) {
    this.cache = new TtlCache({
      ttlMs: deps.detailsTtlMs ?? SERVER_DETAILS_TTL_MS,
      maxEntries: 10_000,
    });
  }

  /**
   * A server's details: from this process's copy when it is younger than the TTL, else from the
   * database. The result is shared and frozen: callers copy what they change.
   */
  async describe(id: string): Promise<ServerDetails> {
    return (await this.resolve(id)).details;
  }

  /** The server, from this process's copy when it is younger than the TTL; a 404 for an unknown id. */
  private resolve(id: string): Promise<ResolvedServer> {
    // Only catalog ids are ever cached: an unknown id misses, and `read` refuses it.
    return this.cache.get(id, () => this.read(id));
  }

  /** Drops this process's copy of a server's details: the next `describe` reads the database. */
  private invalidate(id: string): void {
    this.cache.delete(id);
  }

  private async read(id: string): Promise<ResolvedServer> {
    const entry = this.deps.catalog.require(id);
    const row = (await this.deps.db('gateway_servers').where({ server_id: id }).first()) as
      ServerRow | undefined;
    const pins = row?.version
      ? await this.deps.pins.current(id, row.version)
      : { served: [], quarantined: [] };
    const runnable = this.deps.prober.runnable(entry);
    const denied = this.denial(entry);
    const offered = row?.filter_status === 'allowed' ? pins.served : [];
    const details = deepFreeze<ServerDetails>({
      id,
      title: entry.title,
      description: entry.description,
      registry: entry.registry,
      package: entry.package,
      versionRange: entry.version,
      version: row?.version ?? null,
      digest: row?.digest ?? null,
      protocol:
        row?.protocol_era && row.protocol_version
          ? { era: row.protocol_era, version: row.protocol_version }
          : null,
      filter:
        denied ??
        (row
          ? { status: row.filter_status, reason: row.filter_reason }
          : { status: 'unverified', reason: 'not verified yet' }),
      runnable: runnable.ok ? { ok: true, reason: null } : { ok: false, reason: runnable.reason },
      tier: row?.tier ?? null,
      verifiedAt: row?.verified_at ? new Date(Number(row.verified_at)).toISOString() : null,
      lastError: row?.last_error ?? null,
      tools: offered.filter((tool) => !taskOnly(tool)),
      quarantinedTools: pins.quarantined,
      taskOnlyTools: offered.filter(taskOnly).map((tool) => tool.name),
      // Copies: freezing the details must not freeze the catalog's own objects.
      secrets: entry.secrets.map((secret) => ({ ...secret })),
      network: [...entry.network],
      smokeTool: entry.smokeTest?.tool ?? null,
    });
    // Shallow: the entry is the catalog's own object, shared by every reader and never changed.
    return Object.freeze({ entry, details, settings: this.deps.callSettings(id) });
  }

  /** An operator accepts a quarantined tool's new definition for the server's current version. */
  async approveTool(id: string, toolName: string): Promise<boolean> {
    this.deps.catalog.require(id);
    this.invalidate(id);
    const { version } = await this.describe(id);
    const approved = version !== null && (await this.deps.pins.approve(id, version, toolName));
    if (approved) this.invalidate(id);
    return approved;
  }

  async list(): Promise<ServerDetails[]> {
    return Promise.all(this.deps.catalog.all().map((entry) => this.describe(entry.id)));
  }

  /**
   * The one decision whether a server may run now, for a tool call (and for what only a runnable server
   * answers: its per-server endpoint, its tool list, enabling it): the server, resolved, when it is in
   * the catalog, runnable, allowed by the filter and verified; verified first when needed. Otherwise
   * the refusal: `not_found` (not in the catalog), `unavailable` (not runnable here, or verification
   * failed) or `forbidden` (blocked by the filter).
   */
  async admit(id: string): Promise<ResolvedServer> {
    let server = await this.resolve(id);
    if (!server.details.runnable.ok) {
      throw new SigilError(
        'unavailable',
        `MCP server "${id}" is not runnable here: ${server.details.runnable.reason ?? 'unknown reason'}`,
        {
          details: { serverId: id },
        },
      );
    }
    if (server.details.filter.status === 'unverified') {
      // Another replica may have verified it since this process last looked.
      this.invalidate(id);
      server = await this.resolve(id);
      if (server.details.filter.status === 'unverified') server = await this.verified(id);
    }
    if (this.failedLongAgo(server.details)) server = await this.verified(id);
    const { details } = server;
    if (details.filter.status !== 'allowed') {
      throw new SigilError(
        'forbidden',
        `MCP server "${id}" is blocked by the security filter: ${details.filter.reason ?? 'unknown reason'}`,
        {
          details: { serverId: id, filter: details.filter },
        },
      );
    }
    if (details.tier === null) {
      throw new SigilError(
        'unavailable',
        `MCP server "${id}" failed verification: ${details.lastError ?? 'no tools listed'}`,
        {
          hint: 'GET /api/servers/:id shows the last verification error',
        },
      );
    }
    return server;
  }

  /**
   * A verification that failed for a cause that may pass (a registry or an engine down, not a blocked
   * package) and is older than {@link RETRY_FAILED_VERIFICATION_MS}: the next demand tries again.
   */
  private failedLongAgo(details: ServerDetails): boolean {
    if (details.tier !== null || details.filter.status !== 'allowed' || details.verifiedAt === null)
      return false;
    const age = this.deps.clock.now().getTime() - Date.parse(details.verifiedAt);
    return age >= RETRY_FAILED_VERIFICATION_MS;
  }

  /**
   * Installs and probes a server, records the verdict and tier, and pins or checks its tools.
   * Concurrent calls for one server share a single probe.
   */
  async verify(id: string): Promise<ServerDetails> {
    return (await this.verified(id)).details;
  }

  private verified(id: string): Promise<ResolvedServer> {
    const running = this.inFlight.get(id);
    if (running) return running;
    const work = this.runVerification(id).finally(() => this.inFlight.delete(id));
    this.inFlight.set(id, work);
    return work;
  }

  private async runVerification(id: string): Promise<ResolvedServer> {
    const entry = this.deps.catalog.require(id);
    const now = this.deps.clock.now().getTime();
    const denied = this.denial(entry);
    if (denied || !this.deps.prober.runnable(entry).ok) return this.resolve(id);
    const previous = (await this.deps.db('gateway_servers').where({ server_id: id }).first()) as
      ServerRow | undefined;
    const pinned =
      previous?.version && previous.digest
        ? { name: entry.package, version: previous.version, digest: previous.digest }
        : undefined;
    let row: Omit<ServerRow, 'server_id'>;
    try {
      const probe = await this.deps.prober.probe(entry, pinned);
      const scriptsBlocked = probe.hasInstallScripts && !entry.allowInstallScripts;
      row = {
        version: probe.version,
        digest: probe.digest,
        tier: probe.smoke === 'passed' ? 'tool_smoke_passed' : 'tools_listed',
        filter_status: scriptsBlocked ? 'blocked' : 'allowed',
        filter_reason: scriptsBlocked
          ? 'the package or a dependency declares install scripts (set allowInstallScripts to accept)'
          : null,
        verified_at: now,
        last_error:
          probe.smoke === 'failed' ? `smoke test of tool "${entry.smokeTest?.tool ?? ''}" failed` : null,
        protocol_era: probe.protocol.era,
        protocol_version: probe.protocol.version,
      };
      if (!scriptsBlocked) await this.deps.pins.observe(id, probe.version, probe.tools);
      this.deps.logger.info(
        {
          serverId: id,
          version: probe.version,
          protocol: probe.protocol,
          tier: row.tier,
          tools: probe.tools.length,
        },
        'MCP server verified',
      );
    } catch (err) {
      const reason = (err as SigilError).details?.reason;
      const integrity = reason === 'integrity_mismatch' || reason === PIN_MOVED;
      row = {
        // A moved pin stays recorded, so every later verification refuses the change again.
        version: reason === PIN_MOVED ? (pinned?.version ?? null) : null,
        digest: reason === PIN_MOVED ? (pinned?.digest ?? null) : null,
        tier: null,
        filter_status: integrity ? 'blocked' : 'allowed',
        filter_reason:
          reason === PIN_MOVED
            ? 'the registry changed the pinned version since it was verified'
            : integrity
              ? 'package integrity check failed'
              : null,
        verified_at: now,
        last_error: (err as Error).message,
        protocol_era: reason === PIN_MOVED ? (previous?.protocol_era ?? null) : null,
        protocol_version: reason === PIN_MOVED ? (previous?.protocol_version ?? null) : null,
      };
      this.deps.logger.warn({ serverId: id, err: (err as Error).message }, 'MCP server verification failed');
    }
    try {
      await this.deps
        .db('gateway_servers')
        .insert({ server_id: id, ...row })
        .onConflict('server_id')
        .merge([
          'version',
          'digest',
          'tier',
          'filter_status',
          'filter_reason',
          'verified_at',
          'last_error',
          'protocol_era',
          'protocol_version',
        ]);
    } finally {
      // The pins may have changed even if the verdict could not be written.
      this.invalidate(id);
    }
    return this.resolve(id);
  }

  /**
   * Records the protocol a process of a pinned version was found to speak when it refused the one its
   * verification recorded (see SandboxedServers.launch); nothing when the pin has changed since.
   */
  async recordProtocol(
    id: string,
    pin: { version: string; digest: string },
    protocol: McpProtocol,
  ): Promise<void> {
    try {
      await this.deps
        .db('gateway_servers')
        .where({ server_id: id, version: pin.version, digest: pin.digest })
        .update({ protocol_era: protocol.era, protocol_version: protocol.version });
    } finally {
      this.invalidate(id);
    }
  }

  private denial(entry: CatalogEntry): FilterVerdict | undefined {
    const denied = this.deps.denyList.find((item) => item === entry.id || item === entry.package);
    return denied ? { status: 'blocked', reason: `deny-listed by the operator (${denied})` } : undefined;
  }
}

/** Freezes a plain JSON-like value and everything in it, so a shared copy cannot be changed by a reader. */
function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

const taskOnly = (tool: Tool): boolean => tool.execution?.taskSupport === 'required';
