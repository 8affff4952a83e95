import { SigilError } from '@sigil/plugin-api';
import type { Kernel } from '../../kernel.ts';
import type { ChatService } from '../chat/chat.ts';
import type { HistoryKeys } from '../chat/history-keys.ts';
import type { ConversationStore } from '../chat/history.ts';
import type { Holds } from '../ledger/holds.ts';
import { ProviderKeyUnavailable, type ProviderVault } from '../vault/index.ts';
import { type KeyResolver, ReflectEngine } from './engine.ts';
import { historySource } from './history-source.ts';
import { ReflectMemory } from './memory.ts';
import { MemorySealer } from './memory-sealer.ts';

export interface ReflectComposition {
  kernel: Kernel;
  history: ConversationStore;
  /** The chat history's keys (`runtime.history.dataKeys`): the memory is sealed under them too. */
  keys: HistoryKeys;
  holds: Holds;
  vault: ProviderVault;
  /** The chat service, read when a run calls a model (it is built after the scheduler it tells). */
  chat: () => ChatService;
}

/**
 * The wallet's own key: the triggering session's when its vault is unlocked, else any of the wallet's
 * sessions unlocked in this process; the operator's only when `selfImprovement.internalKey` allows.
 * Otherwise the run waits for an unlock (reason `vault_locked`, what the scheduler waits on).
 */
function keyResolver({ kernel, vault }: ReflectComposition): KeyResolver {
  return async (job, slot) => {
    try {
      const own = job.principal
        ? await vault.providerKey(job.principal, slot).catch(() => undefined)
        : undefined;
      return { apiKey: own ?? (await vault.providerKeyOfWallet(job.wallet, slot)), keyKind: 'byok' };
    } catch (err) {
      if (!(err instanceof ProviderKeyUnavailable)) throw err;
      const internal = kernel.config.runtime.providerApiKey;
      if (kernel.config.runtime.selfImprovement.internalKey && internal)
        return { apiKey: internal, keyKind: 'internal' };
      // A run's error is all its history shows, and no session of the caller is involved: the
      // message says what to do on its own (a vault locks at every restart of the runtime).
      const missing = err.reason === 'provider_key_missing';
      throw new SigilError(
        'conflict',
        missing
          ? `Self-improvement waits for your key: none is stored in the ${slot} slot; store one (PUT /wallet/provider-vault/keys/${slot}) and the run starts`
          : `Self-improvement waits for your key: your ${slot} key is stored, but no session has your vault unlocked in this runtime (it locks at every restart); unlock it (POST /wallet/provider-vault/unlock) and the run starts`,
        {
          hint: 'Sign in and unlock your provider vault (POST /wallet/provider-vault/unlock); the waiting run then starts',
          details: { reason: 'vault_locked', slot },
        },
      );
    }
  };
}

/**
 * The self-improvement pipeline on the runtime's chat history, ledger and vault. Its memory is sealed
 * at rest under the history's data keys when they are configured (memory-sealer.ts), and a session
 * deleted with `forget` takes what was learned only from it along, in the deleting transaction.
 */
export function composeReflect(parts: ReflectComposition): { engine: ReflectEngine; memory: ReflectMemory } {
  const { kernel } = parts;
  const settings = kernel.config.runtime.selfImprovement;
  const memory = new ReflectMemory(
    kernel.db,
    kernel.clock,
    new MemorySealer(kernel.db, parts.keys, kernel.clock),
  );
  parts.history.onSessionDeleted(async (session, trx, deletion) =>
    deletion.forget ? memory.forgetSession(session.wallet, session.id, trx) : undefined,
  );
  const engine = new ReflectEngine({
    memory,
    source: historySource(parts.history),
    holds: parts.holds,
    providerFor: (model) => parts.chat().providerFor(model),
    estimate: (entry) => (messages) => parts.chat().turnCost(messages, [], entry.model),
    keys: keyResolver(parts),
    settings,
  });
  return { engine, memory };
}
