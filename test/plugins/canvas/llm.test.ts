import { expect } from 'chai';
import type { CanvasNodeV2, CanvasServicesV2 } from '@sigil/plugin-api';
import { canvasTestContext, describeCanvasNodeKitV2 } from '@sigil/plugin-api/kit';
import { startStandIn, type StandIn } from '@sigil/plugin-api/llm/stand-in';
import llmPlugin from '../../../plugins/canvas/llm/index.ts';
import { rejectionOf } from '../../support/rejection.ts';
import { nodeOf, NOT_APPLICABLE_TO_HOSTED_READS, standInLlm } from './host-services.ts';

/**
 * The `llm` node kind against the real local stand-in LLM, which echoes the prompt: a prompt that is
 * JSON comes back as JSON, which is how structured answers and their schema are tested.
 */
describe('canvas-llm: the llm node kind', function () {
  this.timeout(60_000);
  let standIn: StandIn;
  let node: CanvasNodeV2;
  before(async () => {
    standIn = await startStandIn();
    node = await nodeOf(llmPlugin);
  });
  after(() => standIn.close());

  async function run(
    params: Record<string, unknown>,
    inputs: Record<string, unknown>,
    services?: Partial<CanvasServicesV2>,
    signal?: AbortSignal,
  ) {
    const parsed = node.params.parse(params);
    const llm = standInLlm(standIn);
    const { context, record, dispose } = await canvasTestContext({
      params: parsed,
      inputs,
      services: { llm: llm.llm, ...services },
      ...(signal ? { signal } : {}),
    });
    try {
      return { outputs: await node.run(context), record, requests: llm.requests };
    } finally {
      await dispose();
    }
  }

  const settled = (promise: Promise<unknown>) =>
    promise.then(
      () => 'resolved',
      (err: unknown) => err,
    );

  describeCanvasNodeKitV2(() => nodeOf(llmPlugin), { expectNotApplicable: NOT_APPLICABLE_TO_HOSTED_READS });

  describe('params and ports', () => {
    it('declares each input of params.inputs as a required port, and text as its output', () => {
      const params = node.params.parse({
        inputs: { topic: 'string', facts: 'array' },
        prompt: '{{ inputs.topic }}',
      });
      expect(node.ports(params)).to.deep.equal({
        inputs: { topic: { type: 'string' }, facts: { type: 'array' } },
        outputs: { text: { type: 'string', description: "The model's answer" } },
      });
    });

    it('adds a json output typed by the schema: object, array, or any JSON', () => {
      const typeOf = (schema: Record<string, unknown>) =>
        node.ports(node.params.parse({ prompt: 'p', schema })).outputs.json?.type;
      expect(typeOf({ type: 'object' })).to.equal('object');
      expect(typeOf({ type: 'array', items: { type: 'string' } })).to.equal('array');
      expect(typeOf({ type: 'integer' })).to.equal('number');
      expect(typeOf({ anyOf: [{ type: 'string' }, { type: 'null' }] })).to.equal('json');
    });

    it('refuses a template that reads an undeclared input or anything outside inputs, naming the param', () => {
      const refused = node.params.safeParse({
        inputs: { topic: 'string' },
        prompt: 'About {{ inputs.topic }} and {{ inputs.other }}',
        system: 'Key: {{ secrets.PROVIDER_API_KEY }} all: {{ inputs }}',
      });
      expect(refused.success).to.equal(false);
      const issues = refused.error?.issues.map(
        (issue) => `${issue.path.join('.')}: ${issue.message.split(' reads')[0]}`,
      );
      expect(issues).to.deep.equal([
        'prompt: {{ inputs.other }}',
        'system: {{ secrets.PROVIDER_API_KEY }}',
        'system: {{ inputs }}',
      ]);
    });

    it('refuses a schema that is not JSON Schema draft 7, naming the param', () => {
      for (const schema of [
        { type: 'objekt' },
        { type: 'object', required: 'title' },
        { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object' },
      ]) {
        const refused = node.params.safeParse({ prompt: 'p', schema });
        expect(
          refused.error?.issues.map((issue) => issue.path.join('.')),
          JSON.stringify(schema),
        ).to.deep.equal(['schema']);
      }
      expect(
        node.params.safeParse({ prompt: 'p', schema: { type: 'array', items: { type: 'string' } } }).success,
      ).to.equal(true);
    });

    it('refuses unknown params, a bad input name and a bad port type', () => {
      expect(node.params.safeParse({ prompt: 'p', temperature: 2 }).success).to.equal(false);
      expect(node.params.safeParse({ prompt: 'p', inputs: { 'a.b': 'string' } }).success).to.equal(false);
      expect(node.params.safeParse({ prompt: 'p', inputs: { a: 'text' } }).success).to.equal(false);
    });
  });

  describe('run', () => {
    it('sends the rendered prompt and system with the model and token cap, and logs model and tokens', async () => {
      const { outputs, record, requests } = await run(
        {
          inputs: { topic: 'string', count: 'number' },
          system: 'Be brief about {{ inputs.topic }}.',
          prompt: 'Write {{ inputs.count }} words about {{ inputs.topic }}.',
          model: 'sigil-echo-mini',
          maxOutputTokens: 50,
        },
        { topic: 'canvas', count: 3 },
      );
      expect(requests).to.deep.equal([
        {
          system: 'Be brief about canvas.',
          prompt: 'Write 3 words about canvas.',
          model: 'sigil-echo-mini',
          maxOutputTokens: 50,
        },
      ]);
      expect(outputs).to.deep.equal({ text: 'Write 3 words about canvas.' });
      // Input tokens: the system's 4 words and the prompt's 5.
      expect(record.logs).to.deep.equal([
        {
          message: 'sigil-echo-mini: 9 tokens in, 5 out',
          data: { model: 'sigil-echo-mini', inputTokens: 9, outputTokens: 5 },
        },
      ]);
    });

    it('passes maxOutputTokens on: the answer is cut there', async () => {
      const { outputs } = await run({ prompt: 'one two three four five', maxOutputTokens: 2 }, {});
      expect(outputs.text).to.equal('one two ');
    });

    it('outputs the structured answer on json when params.schema is given', async () => {
      const page = { title: 'Canvas', sections: ['intro', 'usage'] };
      const schema = {
        type: 'object',
        properties: { title: { type: 'string' }, sections: { type: 'array', items: { type: 'string' } } },
        required: ['title', 'sections'],
      };
      const { outputs, requests } = await run(
        { inputs: { page: 'object' }, prompt: '{{ inputs.page }}', schema },
        { page },
      );
      expect(requests[0]?.schema).to.deep.equal(schema);
      expect(outputs).to.deep.equal({ text: JSON.stringify(page), json: page });
    });

    it("fails with the host's error when the answer does not match the schema", async () => {
      const schema = { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] };
      const err = await rejectionOf(
        run({ inputs: { page: 'object' }, prompt: '{{ inputs.page }}', schema }, { page: { name: 'x' } }),
      );
      expect(err.code).to.equal('unavailable');
      expect(err.details?.reason).to.equal('llm_output_invalid');
    });

    it('fails unavailable when the host gives no json for a schema', async () => {
      const err = await rejectionOf(
        run(
          { prompt: 'p', schema: { type: 'object' } },
          {},
          {
            llm: async () => ({ text: 'not json', model: 'm', inputTokens: 1, outputTokens: 2 }),
          },
        ),
      );
      expect(err.details?.reason).to.equal('structured_output_missing');
    });

    it('fails invalid_request, without calling the model, when a template reads an input with no value', async () => {
      let called = false;
      const err = await rejectionOf(
        run(
          { inputs: { topic: 'string' }, prompt: '{{ inputs.topic.title }}' },
          { topic: 'flat' },
          {
            llm: async () => {
              called = true;
              throw new Error('not reached');
            },
          },
        ),
      );
      expect(err.details?.reason).to.equal('template_value_missing');
      expect(called).to.equal(false);
    });

    it("rejects with the signal's reason when cancelled mid-call, even if the model still answers", async () => {
      const controller = new AbortController();
      const reason = new Error('cancelled by the owner');
      const { llm } = standInLlm(standIn);
      const err = await settled(
        run(
          { prompt: 'hello' },
          {},
          {
            // A host that finishes the turn although the run was cancelled meanwhile.
            llm: async (request) => {
              const answer = await llm(request, new AbortController().signal);
              controller.abort(reason);
              return answer;
            },
          },
          controller.signal,
        ),
      );
      expect(err).to.equal(reason);
    });
  });
});
