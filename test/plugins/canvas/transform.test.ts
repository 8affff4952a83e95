import { expect } from 'chai';
import { canvasTestContext, describePluginKit } from '@sigil/plugin-api/kit';
import * as transformPlugin from '../../../plugins/canvas/transform/index.ts';
import { TransformNode } from '../../../plugins/canvas/transform/index.ts';
import { rejectionOf } from '../../support/rejection.ts';

describe('canvas-transform: the transform node', () => {
  const node = new TransformNode();

  /** Runs the node with `params` (parsed by its schema) on `inputs`. */
  async function run(params: unknown, inputs: Record<string, unknown>): Promise<Record<string, unknown>> {
    const { context, dispose } = await canvasTestContext({ params: node.params.parse(params), inputs });
    try {
      return await node.run(context);
    } finally {
      await dispose();
    }
  }

  /** The paths of the issues `params` is refused with. */
  const refusedAt = (params: unknown) => {
    const parsed = node.params.safeParse(params);
    expect(parsed.success, JSON.stringify(params)).to.equal(false);
    return parsed.error?.issues.map((issue) => issue.path.join('.'));
  };

  it('picks by path, templates strings and keeps literals, each on a port of its declared type', async () => {
    const params = {
      inputs: { draft: 'object', count: 'number' },
      outputs: {
        title: { type: 'string', from: 'inputs.draft.title' },
        tags: { type: 'array', from: 'inputs.draft.tags' },
        count: { type: 'number', from: 'inputs.count' },
        line: {
          type: 'string',
          template: '{{ inputs.draft.title }} ({{inputs.count}}, {{inputs.draft.tags}})',
        },
        settings: { type: 'object', value: { branch: 'main' } },
      },
    };
    expect(node.ports(node.params.parse(params))).to.deep.equal({
      inputs: { draft: { type: 'object' }, count: { type: 'number' } },
      outputs: {
        title: { type: 'string' },
        tags: { type: 'array' },
        count: { type: 'number' },
        line: { type: 'string' },
        settings: { type: 'object' },
      },
    });
    const outputs = await run(params, { draft: { title: 'Hello', tags: ['a', 'b'] }, count: 2 });
    expect(outputs).to.deep.equal({
      title: 'Hello',
      tags: ['a', 'b'],
      count: 2,
      line: 'Hello (2, ["a","b"])',
      settings: { branch: 'main' },
    });
  });

  it("makes an LLM's text into a file list for the write node, paths templated too", async () => {
    const outputs = await run(
      {
        inputs: { page: 'string', slug: 'string' },
        outputs: {
          site: {
            type: 'files',
            files: [
              { path: 'index.html', template: '{{inputs.page}}' },
              { path: 'pages/{{inputs.slug}}.html', template: '<p>{{inputs.slug}}</p>' },
            ],
          },
        },
      },
      { page: '<h1>Hi</h1>', slug: 'about' },
    );
    expect(outputs).to.deep.equal({
      site: [
        { path: 'index.html', content: '<h1>Hi</h1>' },
        { path: 'pages/about.html', content: '<p>about</p>' },
      ],
    });
  });

  it('takes a file list an LLM answered as JSON, checked as files', async () => {
    const params = {
      inputs: { answer: 'object' },
      outputs: { site: { type: 'files', from: 'inputs.answer.files' } },
    };
    const files = [{ path: 'index.html', content: 'x' }];
    expect(await run(params, { answer: { files } })).to.deep.equal({ site: files });
    const error = await rejectionOf(
      run(params, { answer: { files: [{ path: '../escape', content: 'x' }] } }),
    );
    expect(error.code).to.equal('invalid_request');
    expect(error.details).to.include({ reason: 'output_type_mismatch', output: 'site', type: 'files' });
  });

  it('refuses a value of another type than its port declares, and a file path outside the workspace', async () => {
    const mismatch = await rejectionOf(
      run(
        { inputs: { draft: 'object' }, outputs: { title: { type: 'string', from: 'inputs.draft.n' } } },
        { draft: { n: 1 } },
      ),
    );
    expect(mismatch.details).to.include({ reason: 'output_type_mismatch', output: 'title', type: 'string' });
    const escape = await rejectionOf(
      run(
        {
          inputs: { name: 'string' },
          outputs: { site: { type: 'files', files: [{ path: '{{inputs.name}}', template: '' }] } },
        },
        { name: '../../etc/passwd' },
      ),
    );
    expect(escape.details?.reason).to.equal('output_type_mismatch');
    const twice = await rejectionOf(
      run(
        {
          inputs: { name: 'string' },
          outputs: {
            site: {
              type: 'files',
              files: [
                { path: '{{inputs.name}}', template: 'a' },
                { path: 'index.html', template: 'b' },
              ],
            },
          },
        },
        { name: 'index.html' },
      ),
    );
    expect(twice.details).to.deep.equal({ reason: 'duplicate_path', output: 'site', path: 'index.html' });
  });

  it('says which path has no value', async () => {
    const error = await rejectionOf(
      run(
        { inputs: { draft: 'object' }, outputs: { title: { type: 'string', from: 'inputs.draft.title' } } },
        { draft: {} },
      ),
    );
    expect(error.details).to.deep.equal({
      reason: 'value_missing',
      output: 'title',
      path: 'inputs.draft.title',
    });
  });

  it('refuses params with no source, two sources, a template of another type or a literal of the wrong type, with the path', () => {
    const inputs = { a: 'string' };
    expect(refusedAt({ inputs, outputs: { x: { type: 'string' } } })).to.deep.equal(['outputs.x']);
    expect(
      refusedAt({ inputs, outputs: { x: { type: 'string', from: 'inputs.a', value: 'b' } } }),
    ).to.deep.equal(['outputs.x']);
    expect(refusedAt({ inputs, outputs: { x: { type: 'number', template: '{{inputs.a}}' } } })).to.deep.equal(
      ['outputs.x.template'],
    );
    expect(refusedAt({ inputs, outputs: { x: { type: 'number', value: 'one' } } })).to.deep.equal([
      'outputs.x.value',
    ]);
    expect(
      refusedAt({ inputs, outputs: { x: { type: 'string', files: [{ path: 'a', template: '' }] } } }),
    ).to.deep.equal(['outputs.x.files']);
    expect(refusedAt({ inputs, outputs: {} })).to.deep.equal(['outputs']);
  });

  describe('reaches nothing but the declared inputs: no prototype, no code', () => {
    const inputs = { draft: 'object' };

    it('refuses, at validation, paths and templates that do not start at a declared input', () => {
      for (const [output, at] of [
        [{ type: 'string', template: '{{constructor.constructor}}' }, 'outputs.x.template'],
        [{ type: 'string', template: '{{inputs.constructor}}' }, 'outputs.x.template'],
        [{ type: 'json', from: '__proto__.polluted' }, 'outputs.x.from'],
        [{ type: 'json', from: 'inputs.__proto__' }, 'outputs.x.from'],
        [{ type: 'json', from: 'inputs.toString' }, 'outputs.x.from'],
        [
          { type: 'files', files: [{ path: '{{process.env.HOME}}', template: '' }] },
          'outputs.x.files.0.path',
        ],
      ] as const)
        expect(refusedAt({ inputs, outputs: { x: output } }), JSON.stringify(output)).to.deep.equal([at]);
    });

    it('finds no value on inherited properties of a declared input at run time', async () => {
      for (const path of ['inputs.draft.__proto__', 'inputs.draft.constructor', 'inputs.draft.toString']) {
        const error = await rejectionOf(
          run({ inputs, outputs: { x: { type: 'json', from: path } } }, { draft: {} }),
        );
        expect(error.details, path).to.deep.equal({ reason: 'value_missing', output: 'x', path });
      }
      const template = await rejectionOf(
        run(
          {
            inputs,
            outputs: { x: { type: 'string', template: '{{inputs.draft.constructor.constructor}}' } },
          },
          { draft: {} },
        ),
      );
      expect(template.details).to.deep.equal({
        reason: 'template_value_missing',
        path: 'inputs.draft.constructor.constructor',
      });
    });

    it('drops a __proto__ port name instead of changing a prototype', () => {
      const params = node.params.parse(
        JSON.parse(
          '{"inputs":{"__proto__":"string","a":"string"},"outputs":{"x":{"type":"string","from":"inputs.a"}}}',
        ),
      );
      expect(Object.keys(params.inputs)).to.deep.equal(['a']);
      expect(Object.getPrototypeOf(params.inputs)).to.equal(Object.prototype);
      expect(({} as Record<string, unknown>).polluted).to.equal(undefined);
    });

    it('inserts what a placeholder-like value holds as text, without rendering it again', async () => {
      const outputs = await run(
        { inputs: { page: 'string' }, outputs: { x: { type: 'string', template: 'a {{inputs.page}} b' } } },
        { page: '{{constructor.constructor}}' },
      );
      expect(outputs).to.deep.equal({ x: 'a {{constructor.constructor}} b' });
    });
  });

  it('stops before doing anything once its signal aborted', async () => {
    const controller = new AbortController();
    const reason = new Error('cancelled');
    controller.abort(reason);
    const { context, dispose } = await canvasTestContext({
      params: node.params.parse(node.example.params),
      inputs: node.example.inputs,
      signal: controller.signal,
    });
    try {
      const outcome = await node.run(context).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(outcome).to.equal(reason);
    } finally {
      await dispose();
    }
  });

  it('runs its own example', async () => {
    expect(await run(node.example.params, node.example.inputs)).to.deep.equal({
      files: [{ path: 'index.html', content: '<!doctype html><title>Hello</title><h1>Hello</h1>' }],
      title: 'Hello',
      summary: 'Hello: 1 words',
    });
  });
});

// Not a writes node, and it is given no secret.
describePluginKit(
  transformPlugin,
  {},
  {
    expectNotApplicable: [
      'canvas-node.writes-need-approval',
      'canvas-node.writes-once',
      'canvas-node.no-secret',
    ],
  },
);
