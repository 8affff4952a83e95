/**
 * The stand-in's answers to the runtime's self-improvement calls, derived from what they are given so
 * that a test's conversation decides what is learned. A call is recognized by the `$id` of the JSON
 * Schema its system message carries (the runtime asks every model for JSON that way); the answer is
 * that JSON. Rules (also in docs/self-improvement.md, "The stand-in"):
 *
 * Facets (schema `FACETS_SCHEMA_ID`): the user message is a transcript, one `[<message id>] <role>: <text>`
 * line per message (`tool <name>: ok|error` for a tool call's outcome). For each user line, each
 * sentence that
 * - says `always`, `never`, `from now on`, `don't` or `do not` is a `preference`, or a `correction`
 *   when the line starts with `no`, `actually` or `wrong`; its statement is the sentence from that
 *   word on (a leading `no,`, `actually,`, `please` dropped), first letter upper-cased;
 * - says `I want to`, `I need to` or `my goal is` is a `goal`, its statement the sentence.
 * Each tool line is a `tool_usage` facet `<name> worked` or `<name> failed`.
 *
 * Learnings (schema `LEARNINGS_SCHEMA_ID`): the user message is JSON `{ learnings, facets }` (existing
 * active learnings `{id, statement}`, new facets `{id, kind, statement, sessionId}`). Each correction,
 * preference or goal facet becomes a learning (confidence 0.9, 0.8, 0.6), the same statement
 * (case-insensitive) once; it supersedes each existing learning whose first three words are the same
 * and whose statement differs ("Always answer in metric units" supersedes "Always answer in imperial
 * units"). The tools that worked in a session, in order, make a skill when the same sequence worked in
 * two or more sessions: named `<tool>-then-<tool>` (lower-case, `_` as `-`), one numbered step a tool.
 */

export const FACETS_SCHEMA_ID = 'https://sigil.dev/schemas/reflect/facets-v1.json';
export const LEARNINGS_SCHEMA_ID = 'https://sigil.dev/schemas/reflect/learnings-v1.json';

interface Facet {
  kind: 'preference' | 'correction' | 'goal' | 'tool_usage';
  statement: string;
  messageIds: string[];
}

const LINE = /^\[([^\]]+)\]\s+(user|assistant|tool)(?:\s+([^:\s]+))?:\s*(.*)$/;
const PREFERENCE = /\b(always|never|from now on|don't|do not)\b/i;
const GOAL = /\b(i want to|i need to|my goal is)\b/i;
const CORRECTION_START = /^\s*(no|actually|wrong)\b/i;

const sentences = (text: string): string[] =>
  text
    .split(/(?<=[.!?])\s+/)
    .map((sentence) => sentence.trim().replace(/[.!?]+$/, ''))
    .filter(Boolean);

const capitalized = (text: string): string => text.charAt(0).toUpperCase() + text.slice(1);

/** The facets of a transcript (the rules above). */
export function facetsOf(transcript: string): { facets: Facet[] } {
  const facets: Facet[] = [];
  for (const line of transcript.split('\n')) {
    const match = LINE.exec(line.trim());
    if (!match) continue;
    const [, id = '', role, name, text = ''] = match;
    if (role === 'tool' && name) {
      facets.push({
        kind: 'tool_usage',
        statement: `${name} ${/^ok\b/i.test(text) ? 'worked' : 'failed'}`,
        messageIds: [id],
      });
      continue;
    }
    if (role !== 'user') continue;
    for (const sentence of sentences(text)) {
      const preference = PREFERENCE.exec(sentence);
      if (preference) {
        const from = sentence.slice(preference.index).replace(/^please\s+/i, '');
        facets.push({
          kind: CORRECTION_START.test(text) ? 'correction' : 'preference',
          statement: capitalized(from),
          messageIds: [id],
        });
      } else if (GOAL.test(sentence)) {
        facets.push({ kind: 'goal', statement: capitalized(sentence), messageIds: [id] });
      }
    }
  }
  return { facets };
}

interface LearningsInput {
  learnings: { id: string; statement: string }[];
  facets: { id: string; kind: string; statement: string; sessionId: string }[];
}

const CONFIDENCE: Record<string, number> = { correction: 0.9, preference: 0.8, goal: 0.6 };

const firstWords = (statement: string): string => statement.toLowerCase().split(/\s+/).slice(0, 3).join(' ');

/** Learnings and skills synthesized from facets (the rules above). */
export function learningsOf(input: LearningsInput) {
  const learnings: {
    statement: string;
    confidence: number;
    sourceFacets: string[];
    supersedes: string[];
  }[] = [];
  for (const facet of input.facets) {
    const confidence = CONFIDENCE[facet.kind];
    if (confidence === undefined) continue;
    const same = learnings.find((l) => l.statement.toLowerCase() === facet.statement.toLowerCase());
    if (same) {
      same.sourceFacets.push(facet.id);
      continue;
    }
    const supersedes = input.learnings
      .filter(
        (old) =>
          firstWords(old.statement) === firstWords(facet.statement) &&
          old.statement.toLowerCase() !== facet.statement.toLowerCase(),
      )
      .map((old) => old.id);
    learnings.push({ statement: facet.statement, confidence, sourceFacets: [facet.id], supersedes });
  }

  const sequences = new Map<string, { tools: string[]; sessions: Set<string>; facets: string[] }>();
  const bySession = new Map<string, { tools: string[]; facets: string[] }>();
  for (const facet of input.facets) {
    const worked = /^(\S+) worked$/.exec(facet.statement);
    if (facet.kind !== 'tool_usage' || !worked) continue;
    const session = bySession.get(facet.sessionId) ?? { tools: [], facets: [] };
    session.tools.push(worked[1] as string);
    session.facets.push(facet.id);
    bySession.set(facet.sessionId, session);
  }
  for (const [sessionId, { tools, facets }] of bySession) {
    const key = tools.join(' ');
    const sequence = sequences.get(key) ?? { tools, sessions: new Set(), facets: [] };
    sequence.sessions.add(sessionId);
    sequence.facets.push(...facets);
    sequences.set(key, sequence);
  }
  const skills = [...sequences.values()]
    .filter((sequence) => sequence.sessions.size >= 2)
    .map(({ tools, facets }) => ({
      name: tools.map((tool) => tool.toLowerCase().replace(/_/g, '-')).join('-then-'),
      description: `Runs ${tools.join(', then ')}, as the user asked in ${facets.length} tool calls`,
      instructions: tools.map((tool, i) => `${i + 1}. Call ${tool}.`).join('\n'),
      tools,
      sourceFacets: facets,
    }));
  return { learnings, skills };
}

/**
 * The stand-in's JSON answer when the system text carries one of the schemas above; undefined for
 * any other call.
 */
export function reflectAnswer(system: string, lastUser: string): string | undefined {
  if (system.includes(FACETS_SCHEMA_ID)) return JSON.stringify(facetsOf(lastUser));
  if (system.includes(LEARNINGS_SCHEMA_ID)) {
    try {
      return JSON.stringify(learningsOf(JSON.parse(lastUser) as LearningsInput));
    } catch {
      return JSON.stringify({ learnings: [], skills: [] });
    }
  }
  return undefined;
}
