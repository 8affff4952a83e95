import { type LlmMessage, SigilError } from '@sigil/plugin-api';
import type { ProviderEntry } from '../chat/chat.ts';
import type { KeyKind } from '../chat/cost.ts';
import {
  schemaInstruction,
  streamTurn,
  structuredAnswer,
  type StreamedTurn,
  type TurnEstimate,
} from '../chat/held-turn.ts';
import type { Holds } from '../ledger/holds.ts';
import { type Facet, FACET_KINDS, type FacetKind, type ReflectMemory, type Synthesis } from './memory.ts';
import type {
  ProducedItems,
  ReflectCounts,
  ReflectJob,
  ReflectOutcome,
  ReflectPipeline,
} from './pipeline.ts';
import { FACETS_SCHEMA, FACETS_SYSTEM, LEARNINGS_SCHEMA, LEARNINGS_SYSTEM, SKILL_NAME } from './prompts.ts';
import { RunCharges } from './run-charges.ts';

/** Bumped when extraction changes meaningfully: every session is then read again by the new version. */
export const PIPELINE_VERSION = 1;

/** One stored chat message as the pipeline reads it. */
export interface HistoryMessage {
  id: string;
  seq: number;
  role: 'user' | 'assistant' | 'tool';
  text: string;
  /** For a tool message: the tool called, and whether it failed. */
  toolName?: string;
  isError?: boolean;
}

/** The conversation history the pipeline reads (the chat's stored sessions). */
export interface ConversationSource {
  /** The wallet's sessions that hold messages, each with its agent, model and last message seq. */
  sessions(wallet: string): Promise<{ id: string; agentId: string; model: string; lastSeq: number }[]>;
  /** A session's messages after `afterSeq`, in order. */
  messages(wallet: string, sessionId: string, afterSeq: number): Promise<HistoryMessage[]>;
}

/** The key a run's model calls use: the wallet's own (BYOK) or, when the operator allows, theirs. */
export type KeyResolver = (job: ReflectJob, slot: string) => Promise<{ apiKey: string; keyKind: KeyKind }>;

export interface ReflectSettings {
  /** The model for every call; absent: each session's own model (synthesis: the latest one's). */
  model?: string | undefined;
  maxSessionsPerRun: number;
  maxFacetsPerSynthesis: number;
  maxTranscriptChars: number;
  maxOutputTokens: number;
}

export interface ReflectEngineDeps {
  memory: ReflectMemory;
  source: ConversationSource;
  holds: Holds;
  providerFor(model: string): Promise<ProviderEntry | undefined>;
  estimate(entry: ProviderEntry): TurnEstimate;
  keys: KeyResolver;
  settings: ReflectSettings;
}

/** A run's model calls so far, and what it spends on the ledger. */
interface CallTally {
  llmCalls: number;
  inputTokens: number;
  outputTokens: number;
  charges: RunCharges;
}

/**
 * The self-improvement pipeline: each session's new messages → facets (one model call a session,
 * stored with the session's watermark in one transaction), then the wallet's pending facets →
 * learnings and skills (one call, applied in one transaction). A run holds and charges once per agent
 * whose sessions it reads (RunCharges): each call is budget-checked on that hold before it starts and
 * its cost recorded on it after, and the holds are settled when the run ends, however it ends.
 */
export class ReflectEngine implements ReflectPipeline {
  readonly version = String(PIPELINE_VERSION);

  constructor(private readonly deps: ReflectEngineDeps) {}

  counts(wallet: string): Promise<ReflectCounts> {
    return this.deps.memory.counts(wallet);
  }

  describe(wallet: string, produced: ReflectOutcome['produced']): Promise<ProducedItems> {
    return this.deps.memory.produced(wallet, produced);
  }

  async run(job: ReflectJob): Promise<ReflectOutcome> {
    const charges = new RunCharges(this.deps.holds, job);
    let outcome: Omit<ReflectOutcome, 'charged'>;
    try {
      outcome = await this.work(job, charges);
    } finally {
      // Done, failed or aborted at shutdown: each agent's hold is charged what its calls used.
      await charges.settle();
    }
    return { ...outcome, charged: charges.charged };
  }

  private async work(job: ReflectJob, charges: RunCharges): Promise<Omit<ReflectOutcome, 'charged'>> {
    const tally: CallTally = { llmCalls: 0, inputTokens: 0, outputTokens: 0, charges };
    const produced: ReflectOutcome['produced'] = { facets: [], learnings: [], skills: [] };
    const { memory, settings } = this.deps;
    const marks = await memory.watermarks(job.wallet, PIPELINE_VERSION);
    const stored = await this.deps.source.sessions(job.wallet);
    const sessions = stored
      .filter((session) => session.lastSeq > (marks.get(session.id) ?? 0))
      .slice(0, settings.maxSessionsPerRun);
    for (const session of sessions) {
      job.signal.throwIfAborted();
      const from = marks.get(session.id) ?? 0;
      const messages = await this.deps.source.messages(job.wallet, session.id, from);
      const facets = await this.extract(job, session, from, messages, tally);
      produced.facets.push(
        ...(await memory.addFacets(job.wallet, PIPELINE_VERSION, job.runId, session, facets)),
      );
    }
    const pending = await memory.pendingFacets(job.wallet, settings.maxFacetsPerSynthesis);
    if (pending.length > 0) {
      job.signal.throwIfAborted();
      const synthesis = await this.synthesize(job, pending, stored, tally);
      const applied = await memory.apply(job.wallet, job.runId, pending, synthesis);
      produced.learnings.push(...applied.learnings);
      produced.skills.push(...applied.skills);
    }
    return {
      sessions: sessions.length,
      facets: produced.facets.length,
      learnings: produced.learnings.length,
      skills: produced.skills.length,
      llmCalls: tally.llmCalls,
      inputTokens: tally.inputTokens,
      outputTokens: tally.outputTokens,
      produced,
    };
  }

  private async extract(
    job: ReflectJob,
    session: { id: string; agentId: string; model: string; lastSeq: number },
    from: number,
    messages: readonly HistoryMessage[],
    tally: CallTally,
  ): Promise<{ kind: FacetKind; statement: string; messageIds: string[] }[]> {
    const transcript = transcriptOf(messages, this.deps.settings.maxTranscriptChars);
    if (transcript === '') return [];
    const answer = (await this.call(job, {
      agentId: session.agentId,
      model: this.deps.settings.model ?? session.model,
      system: `${FACETS_SYSTEM}\n\n${schemaInstruction(FACETS_SCHEMA)}`,
      user: transcript,
      schema: FACETS_SCHEMA,
      tally,
    })) as { facets: { kind: FacetKind; statement: string; messageIds: string[] }[] };
    // Provenance is only what the transcript showed: a model cannot cite a message it was not given.
    const shown = new Set(messages.map((message) => message.id));
    return answer.facets
      .map((facet) => ({ ...facet, messageIds: facet.messageIds.filter((id) => shown.has(id)) }))
      .filter((facet) => facet.messageIds.length > 0 && FACET_KINDS.includes(facet.kind));
  }

  private async synthesize(
    job: ReflectJob,
    pending: readonly Facet[],
    stored: readonly { id: string; model: string }[],
    tally: CallTally,
  ): Promise<Synthesis> {
    const active = await this.deps.memory.learnings(job.wallet);
    const latest = pending.at(-1) as Facet;
    const sessionModel = stored.find((session) => session.id === latest.sessionId)?.model;
    const model = this.deps.settings.model ?? sessionModel;
    if (model === undefined)
      throw new SigilError('invalid_request', 'No model to synthesize learnings with', {
        hint: 'Set runtime.selfImprovement.model',
        details: { reason: 'model_not_offered' },
      });
    const answer = (await this.call(job, {
      agentId: latest.agentId,
      model,
      system: `${LEARNINGS_SYSTEM}\n\n${schemaInstruction(LEARNINGS_SCHEMA)}`,
      user: JSON.stringify({
        learnings: active.map(({ id, statement }) => ({ id, statement })),
        facets: pending.map(({ id, kind, statement, sessionId }) => ({ id, kind, statement, sessionId })),
      }),
      schema: LEARNINGS_SCHEMA,
      tally,
    })) as {
      learnings: { statement: string; confidence: number; sourceFacets: string[]; supersedes: string[] }[];
      skills: {
        name: string;
        description: string;
        instructions: string;
        tools: string[];
        sourceFacets: string[];
      }[];
    };
    // What the model cites must be what it was given; a skill's name must be a SKILL.md name.
    const given = new Set(pending.map((facet) => facet.id));
    const current = new Set(active.map((learning) => learning.id));
    const cited = (ids: readonly string[]) => ids.filter((id) => given.has(id));
    return {
      learnings: answer.learnings
        .map((learning) => ({
          statement: learning.statement.trim(),
          confidence: Math.min(1, Math.max(0, learning.confidence)),
          facets: cited(learning.sourceFacets),
          supersedes: learning.supersedes.filter((id) => current.has(id)),
        }))
        .filter((learning) => learning.statement !== '' && learning.facets.length > 0),
      skills: answer.skills
        .filter((skill) => SKILL_NAME.test(skill.name))
        .map((skill) => ({ ...skill, facets: cited(skill.sourceFacets) }))
        .filter((skill) => skill.facets.length > 0),
    };
  }

  /**
   * One model call for JSON: budget-checked on the agent's hold of the run before it starts, its cost
   * recorded on that hold after (also when it failed half-way).
   */
  private async call(
    job: ReflectJob,
    call: {
      agentId: string;
      model: string;
      system: string;
      user: string;
      schema: Record<string, unknown>;
      tally: CallTally;
    },
  ): Promise<unknown> {
    const entry = await this.deps.providerFor(call.model);
    if (!entry)
      throw new SigilError('invalid_request', `Model ${call.model} is not offered here`, {
        details: { reason: 'model_not_offered', model: call.model },
      });
    const { apiKey, keyKind } = await this.deps.keys(job, entry.provider.keySlot);
    const messages: LlmMessage[] = [
      { role: 'system', content: call.system },
      { role: 'user', content: call.user },
    ];
    const { charges } = call.tally;
    await charges.reserve(call.agentId, keyKind, this.deps.estimate(entry)(messages));
    const turn: StreamedTurn = { text: '', inputTokens: 0, outputTokens: 0, baseLlmCost: 0n };
    try {
      const request = {
        entry,
        apiKey,
        messages,
        maxOutputTokens: this.deps.settings.maxOutputTokens,
        signal: job.signal,
      };
      await streamTurn(request, turn, () => charges.keep(call.agentId));
    } finally {
      call.tally.llmCalls++;
      call.tally.inputTokens += turn.inputTokens;
      call.tally.outputTokens += turn.outputTokens;
      await charges.spent(call.agentId, keyKind, turn.baseLlmCost);
    }
    return structuredAnswer(turn.text, call.schema);
  }
}

/**
 * Messages as transcript lines the extraction prompt describes, newest kept when over `maxChars`
 * (the latest turns say most about what the user wants now).
 */
export function transcriptOf(messages: readonly HistoryMessage[], maxChars: number): string {
  const lines = messages.map((message) =>
    message.role === 'tool'
      ? `[${message.id}] tool ${message.toolName ?? 'unknown'}: ${message.isError ? 'error' : 'ok'}`
      : `[${message.id}] ${message.role}: ${message.text.replace(/\s*\n\s*/g, ' ')}`,
  );
  let total = 0;
  let start = lines.length;
  while (start > 0 && total + (lines[start - 1] as string).length + 1 <= maxChars)
    total += (lines[--start] as string).length + 1;
  return lines.slice(start).join('\n');
}
