import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { REGISTRY_KIND_RULE, SigilError } from '@sigil/plugin-api';
import { PARSED_ONCE } from '../../core/config/load.ts';
import defaultCatalog from './default-catalog.json' with { type: 'json' };

const serverId = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'lowercase letters, digits and dashes; at most 63 characters')
  .refine((id) => !id.includes('__'), 'must not contain "__" (it separates server and tool names)');

/** One MCP server the gateway can run. The catalog is the operator's list of what may run at all. */
export const catalogEntrySchema = z
  .object({
    id: serverId,
    title: z.string().min(1).max(120),
    description: z.string().max(2000).default(''),
    registry: z
      .string()
      .regex(REGISTRY_KIND_RULE.pattern, `a registry kind: ${REGISTRY_KIND_RULE.says}`)
      .describe(
        'The registryKind of a loaded package-registry plugin: npm (built in), or one a plugin brings',
      ),
    package: z.string().min(1).max(214),
    version: z
      .string()
      .min(1)
      .max(100)
      .describe('An exact version or a range; resolved and pinned at warmup'),
    /**
     * How to start it: an executable the package declares (an npm bin, a Python console script), a
     * file inside it, or a Python module (`python -m`), plus arguments. None: the package's only
     * executable, or an image's own entrypoint.
     */
    entry: z
      .object({
        bin: z.string().min(1).optional(),
        path: z.string().min(1).optional(),
        module: z.string().min(1).optional(),
        args: z.array(z.string()).default([]),
      })
      .strict()
      .refine(
        (e) => [e.bin, e.path, e.module].filter((field) => field !== undefined).length <= 1,
        'give at most one of "bin", "path" or "module"',
      )
      .default({ args: [] }),
    secrets: z
      .array(
        z
          .object({
            name: z.string().regex(/^[A-Z][A-Z0-9_]*$/),
            required: z.boolean().default(true),
            description: z.string().default(''),
          })
          .strict(),
      )
      .default([]),
    /** Plain settings for the process (never secrets: those are per wallet, see `secrets`). */
    env: z.record(z.string().regex(/^[A-Z][A-Z0-9_]*$/), z.string()).default({}),
    network: z.array(z.string().regex(/^[a-z0-9.-]+:\d{1,5}$/, 'host:port')).default([]),
    /** A tool that is safe to call with no side effects, used by the warmup probe for `tool_smoke_passed`. */
    smokeTest: z
      .object({ tool: z.string(), arguments: z.record(z.string(), z.unknown()).default({}) })
      .strict()
      .optional(),
    allowInstallScripts: z.boolean().default(false),
    /** This server's tool-call time limit: gateway.toolCallTimeoutSeconds when unset, at most gateway.maxToolCallTimeoutSeconds. */
    toolCallTimeoutSeconds: z.number().int().min(1).max(3600).optional(),
    /**
     * The operator vouches that the server keeps nothing between calls (in memory or in files): then
     * anonymous callers share one warm process. Otherwise every anonymous call gets a fresh process,
     * stopped after it, since anonymous callers cannot be told apart (a wallet has a process of its own).
     */
    stateless: z.boolean().default(false),
  })
  .strict();

export type CatalogEntry = z.infer<typeof catalogEntrySchema>;

/** The `reason` in the details of the `not_found` for a server id the catalog does not hold. */
export const UNKNOWN_SERVER = 'unknown_server';

export const catalogFileSchema = z
  .object({ $schema: z.string().optional(), servers: z.array(catalogEntrySchema) })
  .strict();

/** The servers the gateway knows, by id: the shipped default catalog, then the operator's file. */
export class Catalog {
  private readonly byId: ReadonlyMap<string, CatalogEntry>;

  constructor(entries: readonly CatalogEntry[]) {
    const byId = new Map<string, CatalogEntry>();
    for (const entry of entries) byId.set(entry.id, entry);
    this.byId = byId;
  }

  get(id: string): CatalogEntry | undefined {
    return this.byId.get(id);
  }

  /** The entry, or a 404 that says how to find valid ids. */
  require(id: string): CatalogEntry {
    const entry = this.byId.get(id);
    if (!entry)
      throw new SigilError('not_found', `No MCP server "${id}" in the catalog`, {
        hint: 'GET /api/servers lists the catalog',
        details: { reason: UNKNOWN_SERVER },
      });
    return entry;
  }

  all(): CatalogEntry[] {
    return [...this.byId.values()];
  }

  /** Case-insensitive match on id, title, description and package. */
  search(query: string): CatalogEntry[] {
    const needle = query.trim().toLowerCase();
    if (needle === '') return this.all();
    return this.all().filter((entry) =>
      [entry.id, entry.title, entry.description, entry.package].some((field) =>
        field.toLowerCase().includes(needle),
      ),
    );
  }
}

export interface CatalogSources {
  /** Include the shipped default catalog (real MCP servers from npm). */
  includeDefaults: boolean;
  /** An operator's catalog file; its entries replace default entries with the same id. */
  file?: string;
}

export function loadCatalog(sources: CatalogSources): Catalog {
  const entries: CatalogEntry[] = sources.includeDefaults
    ? catalogFileSchema.parse(defaultCatalog, PARSED_ONCE).servers
    : [];
  if (sources.file) entries.push(...readCatalogFile(sources.file));
  return new Catalog(entries);
}

function readCatalogFile(file: string): CatalogEntry[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (cause) {
    throw new SigilError(
      'config_invalid',
      `Cannot read the catalog file ${file}: ${(cause as Error).message}`,
      { cause },
    );
  }
  const parsed = catalogFileSchema.safeParse(raw, PARSED_ONCE);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new SigilError(
      'config_invalid',
      `Invalid catalog file ${file} at ${issue?.path.join('.') ?? ''}: ${issue?.message ?? ''}`,
    );
  }
  return parsed.data.servers;
}
