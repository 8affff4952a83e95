import { setTimeout as delay } from 'node:timers/promises';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { TtlCache } from '@sigil/plugin-api/cache';
import type { Clock } from '../../core/clock.ts';
import { canonicalJson, sha256Hex } from '../../core/crypto.ts';
import type { Database } from '../../core/db/database.ts';
import type { DatabaseLeases, Lease } from '../../core/db/leases.ts';
import { Renewal } from '../../core/db/renewal.ts';
import type { McpProtocol } from '../../core/mcp/era.ts';
import { isLeaseLost, type ResolvedPackage, SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../core/log.ts';
import type { ServerCallSettings } from './call-limits.ts';
import type { Catalog, CatalogEntry } from './catalog.ts';
import type { QuarantinedTool, ToolPins } from './tool-pins.ts';
import { PIN_MOVED, pinOf } from './launcher.ts';
import { RetryLater } from './retry-later.ts';

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
  /**
   * Installs a verified pin into this process's package cache, as its first start would: what a
   * replica that took another's verification does at start-up, so its first call starts at once.
   */
  prepare(entry: CatalogEntry, pin: ResolvedPackage): Promise<void>;
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

/** A server as read from the database, with how many verifications of it were recorded then. */
interface ReadServer extends ResolvedServer {
  verifications: number;
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
  /** The catalog entry verified (sha256 of its canonical JSON); null before 0190. */
  entry_hash: string | null;
  /** How many verifications were recorded: it grows with each, whichever replica made it. */
  verifications: number | string;
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
 * How long a replica waits for another replica's verification of a server before answering 503 (try
 * again): installs and probes take seconds, a large image minutes. A holder that died frees the
 * verification sooner, once its lease runs out.
 */
const VERIFICATION_WAIT_MS = 120_000;
/** How often a replica waiting for another's verification looks whether its verdict is recorded. */
const VERIFICATION_POLL_MS = 250;
/** The lease under which one replica at a time verifies a server. */
const verificationLease = (id: string): string => `gateway:verify:${id}`;

/**
 * The catalog as the gateway sees it at run time, and the one place that decides whether a server may
 * run (`admit`): each server's catalog entry, security filter verdict, runnability, verification tier,
 * served tools and call settings. Verdicts live in the database, so replicas agree on them; each
 * process keeps a short-lived copy, so a tool call does not read them on every request. A server is
 * verified by one replica at a time, under a lease: another that needs it meanwhile waits for, and
 * takes, the verdict recorded.
 */
export class ServerDirectory {
  private readonly inFlight = new Map<string, Promise<ReadServer>>();
  private readonly cache: TtlCache<string, ReadServer>;

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
      /** The leases verifications are made under, taken as `holder` (this replica's id). */
      leases: DatabaseLeases;
      holder: string;
      /** How long a verification's lease lasts unrenewed (`database.leaseSeconds`). */
      leaseMs: number;
      /** Overrides {@link VERIFICATION_WAIT_MS}. */
      verificationWaitMs?: number;
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
  private resolve(id: string): Promise<ReadServer> {
    // Only catalog ids are ever cached: an unknown id misses, and `read` refuses it.
    return this.cache.get(id, () => this.read(id));
  }

  /** Drops this process's copy of a server's details: the next `describe` reads the database. */
  private invalidate(id: string): void {
    this.cache.delete(id);
  }

  private async read(id: string): Promise<ReadServer> {
    const entry = this.deps.catalog.require(id);
    const row = await this.recorded(id);
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
    return Object.freeze({
      entry,
      details,
      settings: this.deps.callSettings(id),
      verifications: Number(row?.verifications ?? 0),
    });
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
      if (server.details.filter.status === 'unverified')
        server = await this.verified(id, server.verifications);
    }
    if (this.failedLongAgo(server.details)) server = await this.verified(id, server.verifications);
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
   * Concurrent calls for one server share a single probe, on every replica (see `verifiedOnce`).
   */
  async verify(id: string): Promise<ServerDetails> {
    return (await this.verified(id)).details;
  }

  /**
   * Verifies the server unless a verdict of its catalog entry as this process has it was recorded at
   * or after `sinceMs`, on any replica, and did not fail (the server verified, or blocked): that
   * verdict is then taken as it is. What a replica starting warms up with.
   */
  async verifyUnlessRecent(id: string, sinceMs: number): Promise<ServerDetails> {
    const entry = this.deps.catalog.require(id);
    const row = await this.recorded(id);
    const recent =
      row !== undefined &&
      row.entry_hash === entryHash(entry) &&
      Number(row.verified_at) >= sinceMs &&
      (row.tier !== null || row.filter_status === 'blocked');
    if (!recent) return (await this.verified(id, Number(row?.verifications ?? 0))).details;
    this.invalidate(id);
    return this.describe(id);
  }

  /**
   * Installs the server's verified pin into this process's package cache (already there when this
   * replica verified it, or when replicas share the cache), so its first call starts at once.
   */
  async prepare(id: string): Promise<void> {
    const { entry, details } = await this.resolve(id);
    if (details.tier === null || details.filter.status !== 'allowed' || !details.runnable.ok) return;
    await this.deps.prober.prepare(entry, pinOf(details));
  }

  /**
   * The server verified, once across replicas: `seen` is how many verifications of it the caller saw
   * recorded (read now when not given); one recorded since is taken rather than made again.
   */
  private verified(id: string, seen?: number): Promise<ReadServer> {
    const running = this.inFlight.get(id);
    if (running) return running;
    const work = this.verifiedOnce(id, seen).finally(() => this.inFlight.delete(id));
    this.inFlight.set(id, work);
    return work;
  }

  /**
   * Verifies the server once across replicas: under its lease, or, while another replica holds it,
   * by waiting for that replica's verdict (`verifications` grows when one is recorded) and taking it.
   * A holder that dies stops renewing, so its lease runs out within `leaseMs` and a waiter takes it
   * over; a holder that lost its lease (paused past it) records nothing and waits in turn. A wait
   * longer than {@link VERIFICATION_WAIT_MS} answers 503: try again.
   */
  private async verifiedOnce(id: string, seen: number | undefined): Promise<ReadServer> {
    const entry = this.deps.catalog.require(id);
    if (this.denial(entry) || !this.deps.prober.runnable(entry).ok) return this.resolve(id);
    const { leases, holder, leaseMs } = this.deps;
    const before = seen ?? (await this.verifications(id));
    const deadline = performance.now() + (this.deps.verificationWaitMs ?? VERIFICATION_WAIT_MS);
    for (;;) {
      const lease = await leases.acquire(verificationLease(id), holder, leaseMs);
      if (lease) {
        try {
          // Unless the holder it waited for recorded its verdict just before letting go.
          if ((await this.verifications(id)) === before) return await this.runVerification(entry, lease);
        } catch (err) {
          if (!isLeaseLost(err)) throw err;
          this.deps.logger.info(
            { serverId: id },
            'verification lease lost: taking the next holder’s verdict',
          );
        } finally {
          await leases.release(lease).catch((err: unknown) => {
            this.deps.logger.warn({ err, serverId: id }, 'a verification lease was not released');
          });
        }
      }
      if ((await this.verifications(id)) !== before) {
        this.invalidate(id);
        return this.resolve(id);
      }
      if (performance.now() >= deadline) {
        throw new RetryLater(
          'unavailable',
          `MCP server "${id}" is being verified by another gateway replica`,
          Math.ceil(leaseMs / 1000),
          'Retry shortly: the verification in progress records its verdict for every replica',
        );
      }
      await delay(VERIFICATION_POLL_MS);
    }
  }

  /** How many verifications of the server were recorded, on any replica. */
  private async verifications(id: string): Promise<number> {
    return Number((await this.recorded(id))?.verifications ?? 0);
  }

  /** The server's row: its verdict as last recorded, by any replica. */
  private async recorded(id: string): Promise<ServerRow | undefined> {
    return (await this.deps.db('gateway_servers').where({ server_id: id }).first()) as ServerRow | undefined;
  }

  /**
   * Probes the server under `lease` (renewed meanwhile), then records the verdict, its tools against
   * the pins and one more verification in one transaction fenced by the lease: a holder that lost it
   * records nothing (`leaseLost`).
   */
  private async runVerification(entry: CatalogEntry, lease: Lease): Promise<ReadServer> {
    const id = entry.id;
    const now = this.deps.clock.now().getTime();
    const previous = await this.recorded(id);
    const pinned =
      previous?.version && previous.digest
        ? { name: entry.package, version: previous.version, digest: previous.digest }
        : undefined;
    const renewal = new Renewal(this.deps.leaseMs, () => this.deps.leases.renew(lease), {
      failed: (err) => this.deps.logger.warn({ err, serverId: id }, 'a verification lease was not renewed'),
    });
    let row: Omit<ServerRow, 'server_id' | 'verifications'>;
    let observed: ProbeResult | undefined;
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
        entry_hash: entryHash(entry),
      };
      if (!scriptsBlocked) observed = probe;
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
        entry_hash: entryHash(entry),
      };
      this.deps.logger.warn({ serverId: id, err: (err as Error).message }, 'MCP server verification failed');
    } finally {
      renewal.stop();
    }
    await this.deps.leases.fenced(lease, async (trx) => {
      if (observed) await this.deps.pins.record(trx, id, observed.version, observed.tools);
      await trx('gateway_servers')
        .insert({ server_id: id, ...row, verifications: 1 })
        .onConflict('server_id')
        .merge({ ...row, verifications: trx.raw('gateway_servers.verifications + 1') });
    });
    this.invalidate(id);
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

/** The catalog entry a verification was made for, as recorded with its verdict. */
const entryHash = (entry: CatalogEntry): string => sha256Hex(canonicalJson(entry));
