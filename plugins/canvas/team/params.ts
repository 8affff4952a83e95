import { z } from 'zod';
import { DECLARED_INPUTS, refineTemplate } from '@sigil/plugin-api/canvas';

/** The operator's ceilings on what a team node's params may ask for: each bounds a run's model turns. */
export const TEAM_CONFIG = z
  .object({
    maxTeammates: z.number().int().min(1).max(32).default(8).describe('Most teammates one node may declare'),
    maxTasks: z
      .number()
      .int()
      .min(1)
      .max(64)
      .default(8)
      .describe('Most tasks a plan may have (params.maxTasks at most)'),
    maxSteps: z
      .number()
      .int()
      .min(1)
      .max(100)
      .default(10)
      .describe("Most steps (model turns) of one teammate's task (a teammate's maxSteps at most)"),
    maxConcurrency: z
      .number()
      .int()
      .min(1)
      .max(32)
      .default(4)
      .describe('Most tasks running at once (params.concurrency at most)'),
  })
  .strict();

export type TeamConfig = z.output<typeof TEAM_CONFIG>;

const MODEL = z.string().min(1).max(200);

/** The params schema under the operator's ceilings. */
export function teamParams(config: TeamConfig) {
  const teammate = z
    .object({
      name: z
        .string()
        .regex(
          /^[a-z][a-z0-9-]{0,39}$/,
          'lowercase letters, digits and dashes, starting with a letter (at most 40)',
        ),
      instructions: z
        .string()
        .min(1)
        .max(20_000)
        .describe("The teammate's system prompt: who it is, how it works"),
      servers: z
        .array(z.string().min(1).max(200))
        .max(16)
        .default([])
        .describe('Gateway server ids whose tools are this teammate’s own'),
      maxSteps: z.number().int().min(1).max(config.maxSteps).default(Math.min(4, config.maxSteps)),
      model: MODEL.optional().describe("This teammate's model; the node's by default"),
    })
    .strict();
  return z
    .object({
      inputs: DECLARED_INPUTS.describe('Input ports by name and type; the goal reads them'),
      goal: z
        .string()
        .min(1)
        .max(100_000)
        .describe('What the team is to do: a template over the declared inputs'),
      teammates: z.array(teammate).min(1).max(config.maxTeammates),
      model: MODEL.optional().describe("The orchestrator's model, and the teammates' by default"),
      maxTasks: z.number().int().min(1).max(config.maxTasks).default(Math.min(4, config.maxTasks)),
      concurrency: z
        .number()
        .int()
        .min(1)
        .max(config.maxConcurrency)
        .default(Math.min(2, config.maxConcurrency)),
      merge: z
        .enum(['concat', 'llm'])
        .default('concat')
        .describe('concat: the results one after another; llm: one more model turn merges them'),
      maxOutputTokens: z
        .number()
        .int()
        .min(1)
        .max(1_000_000)
        .optional()
        .describe('The cap of every model turn'),
    })
    .strict()
    .superRefine((params, ctx) => {
      refineTemplate(ctx, ['goal'], params.goal, params.inputs);
      const seen = new Set<string>();
      params.teammates.forEach(({ name }, index) => {
        if (seen.has(name))
          ctx.addIssue({
            code: 'custom',
            path: ['teammates', index, 'name'],
            message: `a second teammate ${name}`,
          });
        seen.add(name);
      });
    });
}

export type TeamParams = z.output<ReturnType<typeof teamParams>>;
export type Teammate = TeamParams['teammates'][number];
