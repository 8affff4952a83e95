import { FACET_KINDS } from './memory.ts';

/**
 * What self-improvement asks a model, and the JSON it must answer with. The schemas' `$id`s are
 * stable: the local stand-in model recognizes them (docs/self-improvement.md, "The stand-in").
 */

/** A SKILL.md name: lower-case letters, digits and single hyphens, at most 64 characters. */
export const SKILL_NAME = /^(?=.{1,64}$)[a-z0-9]+(-[a-z0-9]+)*$/;

const ids = { type: 'array', items: { type: 'string', maxLength: 100 }, maxItems: 200 };

export const FACETS_SCHEMA = {
  $id: 'https://sigil.dev/schemas/reflect/facets-v1.json',
  type: 'object',
  required: ['facets'],
  additionalProperties: false,
  properties: {
    facets: {
      type: 'array',
      maxItems: 100,
      items: {
        type: 'object',
        required: ['kind', 'statement', 'messageIds'],
        additionalProperties: false,
        properties: {
          kind: { enum: [...FACET_KINDS] },
          statement: { type: 'string', minLength: 1, maxLength: 500 },
          messageIds: ids,
        },
      },
    },
  },
};

export const LEARNINGS_SCHEMA = {
  $id: 'https://sigil.dev/schemas/reflect/learnings-v1.json',
  type: 'object',
  required: ['learnings', 'skills'],
  additionalProperties: false,
  properties: {
    learnings: {
      type: 'array',
      maxItems: 100,
      items: {
        type: 'object',
        required: ['statement', 'confidence', 'sourceFacets', 'supersedes'],
        additionalProperties: false,
        properties: {
          statement: { type: 'string', minLength: 1, maxLength: 500 },
          confidence: { type: 'number', minimum: 0, maximum: 1 },
          sourceFacets: ids,
          supersedes: ids,
        },
      },
    },
    skills: {
      type: 'array',
      maxItems: 20,
      items: {
        type: 'object',
        required: ['name', 'description', 'instructions', 'tools', 'sourceFacets'],
        additionalProperties: false,
        properties: {
          name: { type: 'string', minLength: 1, maxLength: 64 },
          description: { type: 'string', minLength: 1, maxLength: 1024 },
          instructions: { type: 'string', minLength: 1, maxLength: 20_000 },
          tools: { type: 'array', items: { type: 'string', maxLength: 200 }, maxItems: 50 },
          sourceFacets: ids,
        },
      },
    },
  },
};

export const FACETS_SYSTEM = [
  'You read a conversation between a user and an AI agent and list facets of it that would help the agent serve this user better next time.',
  'Each line of the transcript is `[<message id>] <role>: <text>`; a tool line says which tool the agent called and whether it worked.',
  'Facet kinds: goal (what the user is trying to achieve), preference (how the user wants things done), correction (the user corrected the agent: state the rule to follow from now on), recurring_task (a task the user asks for repeatedly), tool_usage (a tool that worked or failed for a task).',
  'Write each statement as a short instruction or fact in the third person or the imperative, without quoting private data the user did not ask to be remembered.',
  'Cite the ids of the messages each facet comes from. List nothing rather than guess.',
].join('\n');

export const LEARNINGS_SYSTEM = [
  'You maintain what an AI agent has learned about one user. You are given the current learnings (id and statement) and new facets (id, kind, statement, session).',
  'Answer with new learnings: short, general statements the agent should follow in later conversations, each with a confidence between 0 and 1, the facet ids it comes from, and the ids of current learnings it contradicts and replaces (supersedes). Do not repeat a current learning.',
  'Also answer with skills: a multi-step procedure the user has needed in two or more sessions, with a SKILL.md name (lower-case words joined by hyphens), a one-line description of when to use it, numbered instructions, the tools it uses and the facet ids it comes from.',
].join('\n');
