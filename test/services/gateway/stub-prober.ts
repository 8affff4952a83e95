import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import type { ResolvedPackage } from '@sigil/plugin-api';
import type { Kernel } from '../../../services/kernel.ts';
import type { Catalog, CatalogEntry } from '../../../services/gateway/catalog.ts';
import { ServerDirectory, type ProbeResult, type ServerProber } from '../../../services/gateway/servers.ts';
import { ToolPins } from '../../../services/gateway/tool-pins.ts';
import { quietLogger } from '../../support/kernel.ts';

export const echo: Tool = {
  name: 'echo',
  description: 'Echoes the message',
  inputSchema: { type: 'object', properties: { message: { type: 'string' } } },
};

/**
 * A prober that presents whatever tools the test sets, counts its probes and the pins it prepared,
 * and, while `held`, keeps each probe open until the test releases it: a verification in progress.
 */
export class StubProber implements ServerProber {
  tools: Tool[] = [echo];
  probes = 0;
  readonly prepared: string[] = [];
  private gate: { opened: Promise<void>; open: () => void; started: () => void } | undefined;

  /** Holds the next probes open; answers when one has begun, and the release of them all. */
  hold(): { started: Promise<void>; release: () => void } {
    let started: () => void = () => undefined;
    const begun = new Promise<void>((resolve) => (started = resolve));
    let open: () => void = () => undefined;
    const opened = new Promise<void>((resolve) => (open = resolve));
    this.gate = { opened, open, started };
    return {
      started: begun,
      release: () => {
        this.gate = undefined;
        open();
      },
    };
  }

  async probe(entry: CatalogEntry): Promise<ProbeResult> {
    this.probes += 1;
    const gate = this.gate;
    if (gate) {
      gate.started();
      await gate.opened;
    }
    return {
      version: '1.0.0',
      digest: `sha512-${entry.id}`,
      hasInstallScripts: false,
      protocol: { era: 'legacy', version: '2025-11-25' },
      tools: this.tools,
      smoke: 'skipped',
    };
  }

  runnable(): { ok: true } {
    return { ok: true };
  }

  prepare(entry: CatalogEntry, pin: ResolvedPackage): Promise<void> {
    this.prepared.push(`${entry.id}@${pin.version}`);
    return Promise.resolve();
  }
}

/** Every stub server's call settings. */
export const STUB_CALL_SETTINGS = Object.freeze({ timeoutMs: 5000, stateless: false });

/** The server directory of a gateway on `kernel` (its database, leases and replica id) over `catalog`. */
export function stubDirectory(
  kernel: Kernel,
  catalog: Catalog,
  prober: ServerProber,
  options: { detailsTtlMs?: number; verificationWaitMs?: number } = {},
): ServerDirectory {
  return new ServerDirectory({
    db: kernel.db,
    clock: kernel.clock,
    logger: quietLogger(),
    catalog,
    pins: new ToolPins(kernel.db, kernel.clock),
    prober,
    denyList: [],
    callSettings: () => STUB_CALL_SETTINGS,
    leases: kernel.leases,
    holder: kernel.replica.id,
    leaseMs: kernel.config.database.leaseSeconds * 1000,
    ...options,
  });
}
