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

/** Every core service by the name a plugin's dependency on it resolves to. */
export interface CoreServices {
  db: Database;
  logger: PluginLogger;
  clock: Clock;
  secrets: SecretRegistry;
  fetch: Fetch;
}

export type CoreServiceName = keyof CoreServices;

export const CORE_SERVICE_NAMES: readonly CoreServiceName[] = ['db', 'logger', 'clock', 'secrets', 'fetch'];
