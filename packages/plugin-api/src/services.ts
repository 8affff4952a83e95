import type { Knex } from 'knex';

/**
 * The host's services a plugin may depend on (see `coreServices` in dependencies.ts). They are
 * declared here as the small interfaces a plugin uses, so a plugin compiles against this package
 * alone; the host passes its own implementations.
 */

/** Time, injected so that expiries, schedules and retries are testable without sleeping. */
export interface Clock {
  now(): Date;
}

/** One level of the logger: a message, or structured fields then a message (pino's signature). */
export interface LogFn {
  (message: string): void;
  (fields: object, message?: string): void;
}

/**
 * A structured logger bound to the plugin's name (pino underneath). Lines pass through the host's
 * secret scrubbing before they are written, so a value given to `SecretRegistry.add` never shows.
 */
export interface PluginLogger {
  fatal: LogFn;
  error: LogFn;
  warn: LogFn;
  info: LogFn;
  debug: LogFn;
  trace: LogFn;
  child(bindings: Record<string, unknown>): PluginLogger;
}

/** Secret values a plugin holds (keys, tokens): added, they are scrubbed from every log line. */
export interface SecretRegistry {
  add(value: string | undefined): void;
  remove(value: string): void;
}

/** The host's database (knex, on SQLite or PostgreSQL); a plugin keeps its tables under its own prefix. */
export type Database = Knex;

/** Outbound HTTP: the WHATWG fetch the host allows plugins to use. */
export type Fetch = typeof globalThis.fetch;

/** A lease held: by whom, and its fencing token. */
export interface Lease {
  readonly name: string;
  readonly holder: string;
  /** Grows each time the lease is taken: a write fenced by it fails once another took the lease. */
  readonly fence: number;
  /** How long each taking or renewal holds it. */
  readonly ttlMs: number;
}

/**
 * Leases on the host's database, shared by every replica of the services: a named thing (a job's
 * occurrence, an account) held by one holder at a time until it expires. Expiries are judged by the
 * database's clock, never by comparing two processes' clocks. A holder renews well within `ttlMs`;
 * one that stops renewing (it died, or paused) loses the lease at expiry, and writes it fenced with
 * `fenced` then fail, so a holder that woke up late cannot overwrite its successor's work.
 */
export interface Leases {
  /**
   * This process's name as a holder (the host gives its replica's id). A lease held under it is
   * free as soon as the host counts this process dead (its heartbeat stopped), before it expires.
   */
  readonly holder: string;
  /**
   * Takes the lease `name` for `holder` (a name unique to the process, e.g. a random id) for `ttlMs`,
   * with a fence greater than any before it; undefined while a holder, this one included, holds it.
   */
  acquire(name: string, holder: string, ttlMs: number): Promise<Lease | undefined>;
  /** Holds the lease `ttlMs` (its own by default) from now on; false when it was lost (expired or taken). */
  renew(lease: Lease, ttlMs?: number): Promise<boolean>;
  /** Gives the lease up, if still held: anyone may take it at once. */
  release(lease: Lease): Promise<void>;
  /**
   * Runs `work` in a transaction on the host's database that first checks the lease is still held
   * with this fence, locking it so nobody takes it before the transaction ends: the writes of `work`
   * happen under the lease or not at all. Rejects with a SigilError `conflict` whose
   * `details.reason` is `lease_lost` when it is no longer held.
   */
  fenced<T>(lease: Lease, work: (trx: Knex.Transaction) => Promise<T>): Promise<T>;
}

/** Every core service by the name a plugin's dependency on it resolves to. */
export interface CoreServices {
  db: Database;
  logger: PluginLogger;
  clock: Clock;
  secrets: SecretRegistry;
  fetch: Fetch;
  leases: Leases;
}

export type CoreServiceName = keyof CoreServices;

export const CORE_SERVICE_NAMES: readonly CoreServiceName[] = [
  'db',
  'logger',
  'clock',
  'secrets',
  'fetch',
  'leases',
];
