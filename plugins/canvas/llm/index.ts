import { Ajv } from 'ajv';
import { z } from 'zod';
import {
  type CanvasNodeV2,
  type CanvasPortType,
  definePlugin,
  extensionPoints,
  provide,
  SigilError,
} from '@sigil/plugin-api';
import {
  DECLARED_INPUTS,
  declaredInputPorts,
  refineTemplate,
  renderTemplate,
} from '@sigil/plugin-api/canvas';

const TEMPLATE = z.string().max(100_000);

/** A validator as the host's (Ajv, JSON Schema draft 7): a schema it cannot compile is refused at validation. */
const schemaCompiler = new Ajv({ strict: false });

/** Why the host could not validate answers against `schema`, or undefined when it can. */
function schemaProblem(schema: Record<string, unknown>): string | undefined {
  try {
    schemaCompiler.compile(schema);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  } finally {
    // Ajv keeps every schema it compiled; params are validated for every document.
    schemaCompiler.removeSchema(schema);
  }
}

const LLM_PARAMS = z
  .object({
    inputs: DECLARED_INPUTS.describe(
      'Input ports by name and type; templates read them as {{ inputs.<name> }}',
    ),
    prompt: TEMPLATE.min(1).describe('The user message: a template over the declared inputs'),
    system: TEMPLATE.optional().describe('The system message: a template over the declared inputs'),
    model: z
      .string()
      .min(1)
      .max(200)
      .optional()
      .describe("A model a loaded llm-provider offers; the run's agent's by default"),
    schema: z
      .record(z.string(), z.json())
      .optional()
      .describe(
        'JSON Schema of a structured answer: the host validates it, and the node outputs it on `json`',
      ),
    maxOutputTokens: z.number().int().min(1).max(1_000_000).optional(),
  })
  .strict()
  .superRefine((params, ctx) => {
    refineTemplate(ctx, ['prompt'], params.prompt, params.inputs);
    if (params.system !== undefined) refineTemplate(ctx, ['system'], params.system, params.inputs);
    const problem = params.schema && schemaProblem(params.schema);
    if (problem)
      ctx.addIssue({ code: 'custom', path: ['schema'], message: `not a JSON Schema (draft 7): ${problem}` });
  });

type LlmParams = z.output<typeof LLM_PARAMS>;

const SCHEMA_PORT_TYPES: Readonly<Record<string, CanvasPortType>> = {
  object: 'object',
  array: 'array',
  string: 'string',
  number: 'number',
  integer: 'number',
  boolean: 'boolean',
};

/** The port type of answers to `schema`: its `type` when that is one port type, else any JSON. */
const answerPortType = (schema: Record<string, unknown>): CanvasPortType =>
  (typeof schema.type === 'string' ? SCHEMA_PORT_TYPES[schema.type] : undefined) ?? 'json';

const llmNode: CanvasNodeV2<LlmParams> = {
  specVersion: 'v2',
  nodeKind: 'llm',
  description:
    "One model turn with the wallet's own key: a prompt templated over the node's inputs, optionally a JSON answer to a declared schema",
  effect: 'reads',
  params: LLM_PARAMS,
  ports: (params) => ({
    inputs: declaredInputPorts(params.inputs),
    outputs: {
      text: { type: 'string', description: "The model's answer" },
      ...(params.schema
        ? {
            json: {
              type: answerPortType(params.schema),
              description: 'The answer parsed, valid against params.schema',
            },
          }
        : {}),
    },
  }),
  example: {
    params: {
      inputs: { topic: 'string' },
      system: 'You write one short, plain sentence.',
      prompt: 'Write a sentence about {{ inputs.topic }}.',
      maxOutputTokens: 100,
    },
    inputs: { topic: 'canvas workflows' },
  },
  run: async ({ params, inputs, services, signal, log }) => {
    const scope = { inputs };
    let answer;
    try {
      answer = await services.llm(
        {
          prompt: renderTemplate(params.prompt, scope),
          ...(params.system !== undefined ? { system: renderTemplate(params.system, scope) } : {}),
          ...(params.model !== undefined ? { model: params.model } : {}),
          ...(params.schema !== undefined ? { schema: params.schema } : {}),
          ...(params.maxOutputTokens !== undefined ? { maxOutputTokens: params.maxOutputTokens } : {}),
        },
        signal,
      );
    } finally {
      // A host that finished the turn after a cancellation: the node still stops with the signal's reason.
      signal.throwIfAborted();
    }
    const { model, inputTokens, outputTokens } = answer;
    log(`${model}: ${inputTokens} tokens in, ${outputTokens} out`, { model, inputTokens, outputTokens });
    if (params.schema === undefined) return { text: answer.text };
    if (answer.json === undefined)
      throw new SigilError('unavailable', `${model} gave no JSON answer for params.schema`, {
        hint: 'The host validates structured answers; check that the model supports structured output',
        details: { reason: 'structured_output_missing', model },
      });
    return { text: answer.text, json: answer.json };
  },
};

/** The `llm` canvas node kind: one model turn through the host's BYOK `llm` service. */
export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-llm',
  specVersion: 'v2',
  description: 'Canvas node kind `llm`: a model turn over templated inputs, with optional structured output',
  config: z.object({}).strict(),
  provides: [provide(extensionPoints.canvasNodeKinds, 'llm')],
  create: () => llmNode,
});
