import { expect } from 'chai';
import type { CanvasApprovalV2, CanvasNodeV2, CanvasServicesV2 } from '@sigil/plugin-api';
import { approvedDecision, canvasTestContext, describeCanvasNodeKitV2 } from '@sigil/plugin-api/kit';
import gatewayPlugin from '../../../plugins/canvas/gateway/index.ts';
import { rejectionOf } from '../../support/rejection.ts';
import {
  mcpGateway,
  type McpGateway,
  nodeOf,
  NOT_APPLICABLE_TO_HOSTED_READS,
  toolServer,
} from './host-services.ts';

/** The `tool` node kind against a real MCP server (the official SDK's, in process) behind the host's services. */
describe('canvas-gateway: the tool node kind', function () {
  this.timeout(60_000);
  let gateway: McpGateway;
  let node: CanvasNodeV2;
  before(async () => {
    gateway = await mcpGateway({ tools: toolServer() });
    node = await nodeOf(gatewayPlugin);
  });
  after(() => gateway.close());
  beforeEach(() => gateway.calls.splice(0));

  interface RunOptions {
    approvals?: CanvasApprovalV2[];
    services?: Partial<CanvasServicesV2>;
    signal?: AbortSignal;
  }

  async function run(
    params: Record<string, unknown>,
    inputs: Record<string, unknown>,
    options: RunOptions = {},
  ) {
    const { context, record, dispose } = await canvasTestContext({
      params: node.params.parse(params),
      inputs,
      services: { callTool: gateway.callTool, listTools: gateway.listTools, ...options.services },
      ...(options.approvals ? { approvals: options.approvals } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    try {
      return { outputs: await node.run(context), record };
    } finally {
      await dispose();
    }
  }

  describeCanvasNodeKitV2(() => nodeOf(gatewayPlugin), {
    expectNotApplicable: NOT_APPLICABLE_TO_HOSTED_READS,
  });

  describe('params and ports', () => {
    it('declares the inputs of params.inputs, and text, structured (optional) and isError as outputs', () => {
      const ports = node.ports(node.params.parse({ inputs: { q: 'string' }, server: 's', tool: 't' }));
      expect(ports.inputs).to.deep.equal({ q: { type: 'string' } });
      expect(
        Object.entries(ports.outputs).map(([name, port]) => [name, port.type, port.required ?? true]),
      ).to.deep.equal([
        ['text', 'string', true],
        ['structured', 'object', false],
        ['isError', 'boolean', true],
      ]);
    });

    it('refuses an argument template, however deep, that reads no declared input, naming its path', () => {
      const refused = node.params.safeParse({
        inputs: { q: 'string' },
        server: 's',
        tool: 't',
        arguments: {
          query: '{{ inputs.q }}',
          filters: [{ tag: '{{ inputs.tag }}' }],
          key: '{{ env.TOKEN }}',
        },
      });
      expect(refused.error?.issues.map((issue) => issue.path)).to.deep.equal([
        ['arguments', 'filters', 0, 'tag'],
        ['arguments', 'key'],
      ]);
    });

    it('refuses params without a server or a tool, and unknown params', () => {
      expect(node.params.safeParse({ tool: 't' }).success).to.equal(false);
      expect(node.params.safeParse({ server: 's' }).success).to.equal(false);
      expect(node.params.safeParse({ server: 's', tool: 't', effect: 'writes' }).success).to.equal(false);
    });
  });

  describe('run', () => {
    it('calls the tool with its arguments rendered, and outputs its text; logs server, tool and outcome', async () => {
      const { outputs, record } = await run(
        {
          inputs: { name: 'string' },
          server: 'tools',
          tool: 'echo',
          arguments: { text: 'Hello {{ inputs.name }}' },
        },
        { name: 'Ada' },
      );
      expect(gateway.calls).to.deep.equal([
        { server: 'tools', tool: 'echo', arguments: { text: 'Hello Ada' } },
      ]);
      expect(outputs).to.deep.equal({ text: 'Hello Ada', isError: false });
      expect(record.logs).to.deep.equal([
        { message: 'tools/echo: ok, 9 characters', data: { server: 'tools', tool: 'echo', isError: false } },
      ]);
    });

    it('gives a lone placeholder its value as it is (numbers stay numbers), and outputs structured content', async () => {
      const { outputs } = await run(
        {
          inputs: { a: 'number', pair: 'object' },
          server: 'tools',
          tool: 'add',
          arguments: { a: '{{ inputs.a }}', b: '{{ inputs.pair.b }}' },
        },
        { a: 2, pair: { b: 3 } },
      );
      expect(gateway.calls[0]?.arguments).to.deep.equal({ a: 2, b: 3 });
      expect(outputs).to.deep.equal({ text: '5', isError: false, structured: { sum: 5 } });
    });

    it('fails unavailable, reason tool_error, on an error result; with allowError outputs it instead', async () => {
      const params = { server: 'tools', tool: 'fail', arguments: { why: 'no such page' } };
      const err = await rejectionOf(run(params, {}));
      expect([err.code, err.details]).to.deep.equal([
        'unavailable',
        { reason: 'tool_error', server: 'tools', tool: 'fail' },
      ]);
      expect(err.message).to.contain('failed: no such page');
      const { outputs } = await run({ ...params, allowError: true }, {});
      expect(outputs).to.deep.equal({ text: 'failed: no such page', isError: true });
    });

    it('fails invalid_request, calling nothing, when a template reads an input with no value', async () => {
      const err = await rejectionOf(
        run(
          {
            inputs: { page: 'object' },
            server: 'tools',
            tool: 'echo',
            arguments: { text: '{{ inputs.page.title }}' },
          },
          { page: {} },
        ),
      );
      expect(err.details?.reason).to.equal('template_value_missing');
      expect(gateway.calls).to.deep.equal([]);
    });

    it('with requireApproval, refuses to call the tool unless every upstream decision approved', async () => {
      const params = { server: 'tools', tool: 'echo', arguments: { text: 'x' }, requireApproval: true };
      for (const approvals of [[], [approvedDecision('a'), { ...approvedDecision('b'), approved: false }]]) {
        const err = await rejectionOf(run(params, {}, { approvals }));
        expect([err.code, err.details?.reason]).to.deep.equal(['forbidden', 'approval_required']);
      }
      expect(gateway.calls).to.deep.equal([]);
      const { outputs } = await run(params, {}, { approvals: [approvedDecision('a')] });
      expect(outputs.text).to.equal('x');
    });

    it("rejects with the signal's reason when cancelled during the call, even if the tool still answers", async () => {
      const controller = new AbortController();
      const reason = new Error('run cancelled');
      const outcome = await run(
        { server: 'tools', tool: 'echo', arguments: { text: 'x' } },
        {},
        {
          signal: controller.signal,
          services: {
            callTool: async (request) => {
              const result = await gateway.callTool(request, new AbortController().signal);
              controller.abort(reason);
              return result;
            },
          },
        },
      ).then(
        () => 'resolved',
        (err: unknown) => err,
      );
      expect(outcome).to.equal(reason);
    });
  });
});
