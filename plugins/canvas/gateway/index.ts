import { z } from 'zod';
import { type CanvasNodeV2, definePlugin, extensionPoints, provide, SigilError } from '@sigil/plugin-api';
import {
  approvedUpstream,
  DECLARED_INPUTS,
  declaredInputPorts,
  refineTemplate,
} from '@sigil/plugin-api/canvas';
import { mapStrings, renderArgument } from './arguments.ts';

/** How much of a failed tool's text its error quotes. */
const ERROR_EXCERPT_CHARS = 500;

const TOOL_PARAMS = z
  .object({
    inputs: DECLARED_INPUTS.describe('Input ports by name and type; argument templates read them'),
    server: z.string().min(1).max(200).describe('The gateway server id'),
    tool: z.string().min(1).max(200).describe('The tool of that server'),
    arguments: z
      .record(z.string(), z.json())
      .default({})
      .describe('The tool arguments; each string in them is a template over the declared inputs'),
    allowError: z
      .boolean()
      .default(false)
      .describe('Output an error result (isError true) instead of failing the node'),
    requireApproval: z
      .boolean()
      .default(false)
      .describe(
        'Refuse to call the tool unless approval nodes upstream approved: for a tool that changes things',
      ),
  })
  .strict()
  .superRefine((params, ctx) => {
    mapStrings(params.arguments, (text, path) =>
      refineTemplate(ctx, ['arguments', ...path], text, params.inputs),
    );
  });

type ToolParams = z.output<typeof TOOL_PARAMS>;

const toolNode: CanvasNodeV2<ToolParams> = {
  specVersion: 'v2',
  nodeKind: 'tool',
  description:
    "Calls a tool of a gateway server on the wallet's behalf, its arguments templated over the node's inputs",
  effect: 'reads',
  params: TOOL_PARAMS,
  ports: (params) => ({
    inputs: declaredInputPorts(params.inputs),
    outputs: {
      text: { type: 'string', description: "The tool's text content, joined" },
      structured: {
        type: 'object',
        required: false,
        description: "The tool's structured content, when it has one",
      },
      isError: {
        type: 'boolean',
        description: 'Whether the tool reported an error (only true with allowError)',
      },
    },
  }),
  example: {
    params: {
      inputs: { message: 'string' },
      server: 'everything',
      tool: 'echo',
      arguments: { message: '{{ inputs.message }}' },
    },
    inputs: { message: 'hello from a canvas' },
  },
  run: async ({ params, inputs, approvals, services, signal, log }) => {
    const { server, tool } = params;
    if (params.requireApproval && !approvedUpstream(approvals))
      throw new SigilError('forbidden', `The tool node calls ${server}/${tool} only once approved`, {
        hint: 'Put an approval node upstream of this node, and approve it',
        details: { reason: 'approval_required' },
      });
    const request = {
      server,
      tool,
      arguments: mapStrings(params.arguments, (text) => renderArgument(text, { inputs })) as Record<
        string,
        unknown
      >,
    };
    let result;
    try {
      result = await services.callTool(request, signal);
    } finally {
      // A host that finished the call after a cancellation: the node still stops with the signal's reason.
      signal.throwIfAborted();
    }
    const { text, isError, structuredContent } = result;
    log(`${server}/${tool}: ${isError ? 'error' : 'ok'}, ${text.length} characters`, {
      server,
      tool,
      isError,
    });
    if (isError && !params.allowError)
      throw new SigilError(
        'unavailable',
        `Tool ${server}/${tool} failed: ${text.slice(0, ERROR_EXCERPT_CHARS)}`,
        {
          hint: "Check the tool's arguments, or set params.allowError to pass the error on as an output",
          details: { reason: 'tool_error', server, tool },
        },
      );
    return { text, isError, ...(structuredContent ? { structured: structuredContent } : {}) };
  },
};

/** The `tool` canvas node kind: a gateway tool through the host's delegated `callTool` service. */
export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-gateway',
  specVersion: 'v2',
  description: 'Canvas node kind `tool`: a gateway tool call with templated arguments',
  config: z.object({}).strict(),
  provides: [provide(extensionPoints.canvasNodeKinds, 'tool')],
  create: () => toolNode,
});
