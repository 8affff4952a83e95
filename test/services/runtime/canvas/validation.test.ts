import { expect } from 'chai';
import { describeEachDatabase } from '../../../support/kernel.ts';
import {
  canvasUser,
  type CanvasUser,
  type CanvasWorld,
  execute,
  startCanvasWorld,
  workflow,
} from './support.ts';

type Problem = { path: string; message: string };

describeEachDatabase('canvas workflow validation', (database) => {
  let world: CanvasWorld;
  let user: CanvasUser;

  before(async () => {
    world = await startCanvasWorld({ database });
    user = await canvasUser(world.stack);
  });
  after(async () => {
    await world.close();
    world.removeData();
  });

  /** Validates a document; expects a 400 and returns its problems. */
  async function problems(document: unknown): Promise<Problem[]> {
    const res = await user.client.json('POST', '/canvas/workflows/validate', { workflow: document });
    expect(res.status, JSON.stringify(res.body)).to.equal(400);
    expect(res.body.code).to.equal('invalid_request');
    return res.body.details.problems as Problem[];
  }

  it('accepts a valid document and answers its topological order', async () => {
    const res = await user.client.json('POST', '/canvas/workflows/validate', {
      workflow: workflow(
        [
          { id: 'b', kind: 'emit' },
          { id: 'a', kind: 'emit' },
        ],
        ['a.value -> b.after'],
      ),
    });
    expect(res.status).to.equal(200);
    expect(res.body.order).to.deep.equal(['a', 'b']);
  });

  it('publishes the document format as JSON Schema, and each loaded node kind with its params, ports and effect', async () => {
    const schema = (await (await fetch(world.stack.url('runtime', '/canvas/schema.json'))).json()) as {
      properties: { format: { const: string } };
      required: string[];
    };
    expect(schema.properties.format.const).to.equal('sigil.canvas.workflow/v1');
    expect(schema.required).to.include.members(['format', 'name', 'nodes']);
    const kinds = await user.client.json('GET', '/canvas/node-kinds');
    expect(kinds.body.teamMode).to.equal(false);
    const record = kinds.body.nodeKinds.find((k: { kind: string }) => k.kind === 'record');
    expect(record).to.deep.include({ effect: 'writes', teamMode: false });
    expect(record.ports.inputs.value.type).to.equal('json');
    const flaky = kinds.body.nodeKinds.find((k: { kind: string }) => k.kind === 'flaky');
    expect(flaky.params.properties.failTimes.type).to.equal('integer');
    expect((await fetch(world.stack.url('runtime', '/canvas/node-kinds'))).status).to.equal(401);
  });

  it('refuses an unknown kind, naming the loaded ones', async () => {
    const [problem] = await problems(workflow([{ id: 'a', kind: 'nope' }]));
    expect(problem?.path).to.equal('nodes.0.kind');
    expect(problem?.message).to.match(/unknown node kind "nope"; loaded kinds: .*emit/);
  });

  it('refuses a duplicate id, bad params and a bad document shape with their paths', async () => {
    expect(
      (
        await problems(
          workflow([
            { id: 'a', kind: 'emit' },
            { id: 'a', kind: 'emit' },
          ]),
        )
      )[0]?.path,
    ).to.equal('nodes.1.id');
    expect(
      (await problems(workflow([{ id: 'a', kind: 'flaky', params: { failTimes: 'x' } }])))[0]?.path,
    ).to.equal('nodes.0.params.failTimes');
    expect((await problems({ format: 'sigil.canvas.workflow/v1', name: 'x', nodes: [] }))[0]?.path).to.equal(
      'nodes',
    );
    expect((await problems({ ...workflow([{ id: 'a', kind: 'emit' }]), format: 'v0' }))[0]?.path).to.equal(
      'format',
    );
  });

  it('refuses an unknown port, a type mismatch, an input fed twice and a required input with no edge', async () => {
    const nodes = [
      { id: 'a', kind: 'emit', params: { type: 'string' } },
      { id: 'f', kind: 'flaky', params: { failTimes: 0 } },
      { id: 'j', kind: 'join' },
    ];
    expect((await problems(workflow(nodes, ['a.nope -> j.a'])))[0]).to.deep.include({ path: 'edges.0.from' });
    expect((await problems(workflow(nodes, ['a.value -> j.zz'])))[0]?.message).to.match(
      /has no input "zz"; its inputs: a, b/,
    );
    const twice = await problems(workflow(nodes, ['a.value -> j.a', 'f.attempt -> j.a']));
    expect(twice[0]).to.deep.equal({
      path: 'edges.1.to',
      message: 'input j.a is already fed by another edge',
    });
    const missing = await problems(workflow(nodes, []));
    expect(missing[0]?.message).to.equal('required input j.a (json) has no edge');
    const document = {
      ...workflow([{ id: 'r', kind: 'emit' }]),
      inputs: { n: { type: 'number' } },
      edges: [{ from: '$inputs.n', to: 'r.label' }],
    };
    expect((await problems(document))[0]).to.deep.equal({
      path: 'edges.0',
      message: '$inputs.n gives number, r.label takes string',
    });
    const undeclared = await problems({ ...document, edges: [{ from: '$inputs.m', to: 'r.after' }] });
    expect(undeclared[0]).to.deep.include({
      path: 'edges.0.from',
      message: 'the workflow declares no input "m"',
    });
  });

  it('refuses a cycle and names its nodes', async () => {
    const [problem] = await problems(
      workflow(
        [
          { id: 'a', kind: 'emit' },
          { id: 'b', kind: 'emit' },
          { id: 'c', kind: 'emit' },
        ],
        ['a.value -> b.after', 'b.value -> c.after', 'c.value -> a.after'],
      ),
    );
    expect(problem?.path).to.equal('edges');
    expect(problem?.message).to.match(/cycle: ([abc]) → [abc] → [abc] → \1/);
  });

  it('refuses a write node that some path reaches without an approval', async () => {
    const bypass = await problems(
      workflow(
        [
          { id: 'draft', kind: 'emit' },
          { id: 'approve', kind: 'gate' },
          { id: 'other', kind: 'emit' },
          { id: 'merge', kind: 'join' },
          { id: 'write', kind: 'record' },
        ],
        [
          'draft.value -> approve.value',
          'approve.value -> merge.a',
          'other.value -> merge.b',
          'merge.value -> write.value',
        ],
      ),
    );
    expect(bypass[0]?.message).to.match(/write node "write" \(record\) can be reached without an approval/);
    const alone = await problems(
      workflow(
        [
          { id: 'write', kind: 'record' },
          { id: 'src', kind: 'emit' },
        ],
        ['src.value -> write.value'],
      ),
    );
    expect(alone[0]?.path).to.equal('nodes.0');
  });

  it('refuses a run whose inputs miss, mistype or add to the declared ones, and stores nothing', async () => {
    const document = {
      ...workflow([{ id: 'a', kind: 'emit' }], ['$inputs.topic -> a.after']),
      inputs: { topic: { type: 'string' } },
    };
    const before = await user.client.json('GET', '/canvas/runs');
    for (const inputs of [{}, { topic: 3 }, { topic: 'x', extra: 1 }]) {
      const res = await execute(user, { workflow: document, inputs });
      expect(res.status).to.equal(400);
      const body = (await res.json()) as { details: { reason: string } };
      expect(body.details.reason).to.equal('inputs_invalid');
    }
    const after = await user.client.json('GET', '/canvas/runs');
    expect(after.body.runs.length).to.equal(before.body.runs.length);
  });

  it('refuses team-mode nodes while the flag is off, the built-in team kind too, and runs none', async () => {
    const teamWorld = await startCanvasWorld({
      database,
      plugins: ['./team-fixture.ts', 'canvas-team'].map(
        (resolve) => ({ resolve, enabled: true, options: {} }) as never,
      ),
    });
    try {
      const teamUser = await canvasUser(teamWorld.stack);
      const document = workflow([
        { id: 't', kind: 'team-fixture' },
        { id: 'team', kind: 'team', params: { goal: 'g', teammates: [{ name: 'w', instructions: 'i' }] } },
      ]);
      const res = await teamUser.client.json('POST', '/canvas/workflows/validate', { workflow: document });
      expect(res.status).to.equal(400);
      const problems = res.body.details.problems as { path: string; message: string }[];
      expect(problems.map((problem) => problem.path)).to.deep.equal(['nodes.0.kind', 'nodes.1.kind']);
      for (const problem of problems)
        expect(problem.message).to.match(/team mode, which this runtime has off \(runtime.canvas.teamMode\)/);
      const run = await execute(teamUser, { workflow: document });
      expect(run.status).to.equal(400);
      expect((await teamUser.client.json('GET', '/canvas/runs')).body.runs).to.deep.equal([]);
    } finally {
      await teamWorld.close();
      teamWorld.removeData();
    }
  });
});
