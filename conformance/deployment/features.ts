import type { HttpClient, ServiceName } from '../http.ts';
import { modernAbsence } from './mcp.ts';

/**
 * Features a requirement may need beyond what the specs mandate. The runner learns whether the
 * deployment has one from what it exposes (a 404 on the route means it does not), never from being told.
 */
interface Feature {
  /** Probes the deployment; returns why the feature is absent, or undefined when it is there. */
  probe(http: HttpClient): Promise<string | undefined>;
}

/** Any well-formed address will do: a probe only asks whether the route exists. */
const PROBE_ADDRESS = '0x000000000000000000000000000000000000dead';

function absentOn404(service: ServiceName, path: string, absence: string): Feature {
  return {
    probe: async (http) => {
      const response = await http.request({ service, path });
      return response.status === 404 ? `${absence} (GET ${path.split('?')[0]} answered 404)` : undefined;
    },
  };
}

export const FEATURES = {
  /** The runtime spec requires a challenge and verify exchange but leaves its paths open; these are Sigil's. */
  'runtime-wallet-auth': absentOn404(
    'runtime',
    `/auth/challenge?address=${PROBE_ADDRESS}`,
    "the runtime exposes no wallet sign-in at Sigil's paths (the runtime spec does not fix them)",
  ),
  /** The runtime spec names the ledger's fields but not its routes; these are Sigil's (401 unsigned, never 404). */
  'runtime-ledger': absentOn404(
    'runtime',
    '/wallet/balance',
    "the runtime exposes no wallet ledger at Sigil's paths (the runtime spec does not fix them)",
  ),
  /** The spec names chat sessions and SSE but not their routes; these are Sigil's (401 unsigned, never 404). */
  'runtime-chat': absentOn404(
    'runtime',
    '/agents/00000000-0000-4000-8000-000000000000/sessions',
    "the runtime exposes no chat sessions at Sigil's paths (the runtime spec does not fix them)",
  ),
  /** The BYOK vault's routes, Sigil's: the message to sign is public, the rest needs a session. */
  'runtime-provider-vault': absentOn404(
    'runtime',
    '/wallet/provider-vault/message',
    "the runtime exposes no provider-key vault at Sigil's paths (the runtime spec does not fix them)",
  ),
  /** The spec names /canvas/workflows/execute/stream but no method nor body; these are Sigil's routes (401 unsigned). */
  'runtime-canvas': absentOn404(
    'runtime',
    '/canvas/node-kinds',
    "the runtime serves no canvas workflows at Sigil's /canvas paths (off, or another implementation's routes)",
  ),
  /** Sigil's gateway says who a request authenticates as; checks of credentials observe it there. */
  'gateway-session': absentOn404(
    'gateway',
    '/api/auth/session',
    'the gateway exposes no session introspection, so which credential it accepted cannot be observed',
  ),
  /** MCP 2026-07-28 beside 2025-11-25: the gateway spec names no revision, so serving it is a feature. */
  'mcp-2026': { probe: modernAbsence },
} satisfies Record<string, Feature>;

export type FeatureName = keyof typeof FEATURES;

/** Probes each feature at most once per run, however many requirements need it. */
export class FeatureProbe {
  private readonly findings = new Map<FeatureName, Promise<string | undefined>>();

  constructor(private readonly http: HttpClient) {}

  /** Why the first absent feature of `features` is absent, or undefined when all are there. */
  async absence(features: readonly FeatureName[]): Promise<string | undefined> {
    for (const feature of features) {
      let finding = this.findings.get(feature);
      if (!finding) {
        finding = FEATURES[feature].probe(this.http);
        this.findings.set(feature, finding);
      }
      const absent = await finding;
      if (absent !== undefined) return absent;
    }
    return undefined;
  }
}
