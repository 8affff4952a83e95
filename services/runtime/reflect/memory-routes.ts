import Router from '@koa/router';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { parseInput } from '../../../core/http/validate.ts';
import type { ReflectMemory, Skill } from './memory.ts';
import { SKILL_NAME } from './prompts.ts';

export const learningParams = z.object({ id: z.uuid('must be a learning id (a UUID)') });
export const skillParams = z.object({
  name: z.string().regex(SKILL_NAME, 'must be a skill name (lower-case words and hyphens)'),
});
export const learningsQuery = z.object({ status: z.enum(['active', 'superseded', 'all']).default('active') });
export const editBody = z
  .object({
    statement: z.string().trim().min(1, 'must not be empty').max(500).optional(),
    confidence: z.number().min(0).max(1).optional(),
  })
  .strict()
  .refine((body) => body.statement !== undefined || body.confidence !== undefined, {
    message: 'give statement, confidence or both',
  });

const skillNotFound = (name: string) =>
  new SigilError('not_found', `No skill ${name} for this wallet`, { details: { reason: 'skill_not_found' } });

/** A skill as a SKILL.md file: YAML front matter (name, description, tools, version), then its instructions. */
export const skillMarkdown = (skill: Skill): string =>
  [
    '---',
    `name: ${skill.name}`,
    // JSON strings are YAML double-quoted scalars: any description stays one valid value.
    `description: ${JSON.stringify(skill.description)}`,
    `allowed-tools: ${JSON.stringify(skill.tools.join(' '))}`,
    'metadata:',
    `  version: "${skill.version}"`,
    '---',
    '',
    skill.instructions,
    '',
  ].join('\n');

/** `/wallet/learnings…` and `/wallet/skills…`: what self-improvement kept, for its owner to read, edit and delete. */
export function reflectMemoryRouter(memory: ReflectMemory): Router {
  const router = new Router({ prefix: '/wallet' });
  router.use(requireAuth());
  const wallet = (state: { auth?: AuthPrincipal }) => (state.auth as AuthPrincipal).address;

  router.get('/learnings', async (ctx) => {
    const { status } = parseInput(learningsQuery, ctx.query, 'query');
    ctx.body = { learnings: await memory.learnings(wallet(ctx.state), status) };
  });
  router.patch('/learnings/:id', async (ctx) => {
    const { id } = parseInput(learningParams, ctx.params, 'params');
    const change = parseInput(editBody, ctx.request.body ?? {}, 'body');
    ctx.body = await memory.editLearning(wallet(ctx.state), id, change);
  });
  router.delete('/learnings/:id', async (ctx) => {
    const { id } = parseInput(learningParams, ctx.params, 'params');
    await memory.deleteLearning(wallet(ctx.state), id);
    ctx.status = 204;
  });
  router.get('/skills', async (ctx) => {
    ctx.body = { skills: await memory.skills(wallet(ctx.state)) };
  });
  router.get('/skills/:name', async (ctx) => {
    const { name } = parseInput(skillParams, ctx.params, 'params');
    const skill = await memory.skill(wallet(ctx.state), name);
    if (!skill) throw skillNotFound(name);
    ctx.body = skill;
  });
  router.get('/skills/:name/SKILL.md', async (ctx) => {
    const { name } = parseInput(skillParams, ctx.params, 'params');
    const skill = await memory.skill(wallet(ctx.state), name);
    if (!skill) throw skillNotFound(name);
    ctx.type = 'text/markdown; charset=utf-8';
    ctx.body = skillMarkdown(skill);
  });
  router.delete('/skills/:name', async (ctx) => {
    const { name } = parseInput(skillParams, ctx.params, 'params');
    if (!(await memory.deleteSkill(wallet(ctx.state), name))) throw skillNotFound(name);
    ctx.status = 204;
  });
  return router;
}
