import { z } from 'zod';
import { templatePaths } from '@sigil/plugin-api/canvas';
import { ORIGIN, type BrowserVerifyConfig } from './config.ts';

/** What the `url` template may read: the node's `url` input and the run's preview. */
export const URL_TEMPLATE_PATHS = ['inputs.url', 'workspace.previewUrl'] as const;

const statusAssertion = z
  .object({ status: z.number().int().min(100).max(599).describe('The HTTP status of the page') })
  .strict();
const selectorAssertion = z
  .object({
    selector: z.string().min(1).max(1_000).describe('A CSS selector'),
    visible: z
      .boolean()
      .default(true)
      .describe('true: an element it selects is visible; false: none is (absent or hidden)'),
  })
  .strict();
const textAssertion = z
  .object({ text: z.string().min(1).max(10_000).describe("Text the page's visible text contains") })
  .strict();
const titleAssertion = z
  .object({ title: z.string().max(1_000).describe("The page's title, exactly") })
  .strict();

export const assertionSchema = z.union([statusAssertion, selectorAssertion, textAssertion, titleAssertion]);
export type Assertion = z.infer<typeof assertionSchema>;

/** The params of a `browser-verify` node; `allowedOrigins` may only narrow the operator's list. */
export function paramsSchema(config: BrowserVerifyConfig) {
  return z
    .object({
      url: z
        .string()
        .min(1)
        .max(4_096)
        .refine(
          (template) =>
            templatePaths(template).every((path) => (URL_TEMPLATE_PATHS as readonly string[]).includes(path)),
          `a URL, or a template reading only ${URL_TEMPLATE_PATHS.map((path) => `{{${path}}}`).join(' and ')}`,
        )
        .describe('The page to open: a URL or a template, e.g. "{{inputs.url}}index.html"'),
      assertions: z.array(assertionSchema).max(50).default([]),
      screenshot: z.boolean().default(true).describe('Store a PNG screenshot of the page as a run artifact'),
      onFailure: z
        .enum(['fail', 'output'])
        .default('fail')
        .describe('A failed assertion fails the node (default), or only sets the output passed to false'),
      waitUntil: z
        .enum(['load', 'domcontentloaded', 'networkidle'])
        .default('load')
        .describe('When the page counts as loaded, before the assertions are checked'),
      allowedOrigins: z
        .array(
          ORIGIN.refine(
            (origin) => config.allowedOrigins.includes(origin),
            "an origin of the operator's allowedOrigins (params may only narrow it)",
          ),
        )
        .max(100)
        .optional()
        .describe("Origins this node may reach: a part of the operator's list (default: all of it)"),
    })
    .strict();
}

export type BrowserVerifyParams = z.infer<ReturnType<typeof paramsSchema>>;
