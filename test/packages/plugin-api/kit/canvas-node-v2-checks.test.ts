import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expect } from 'chai';
import { z } from 'zod';
import { type CanvasNodeContextV2, type CanvasNodeV2, SigilError } from '@sigil/plugin-api';
import {
  canvasNodeKitV2,
  type CheckResult,
  contractChecks,
  EvidenceRedactor,
  runChecks,
} from '@sigil/plugin-api/kit';
import { importPluginModule, runPluginKit } from '../../../../conformance/plugin.ts';

const ROOT = join(import.meta.dirname, '../../../..');

const byId = (results: readonly CheckResult[]) =>
  Object.fromEntries(results.map((result) => [result.id, result])) as Record<string, CheckResult>;

const failedIds = (results: Record<string, CheckResult>) =>
  Object.values(results)
    .filter((result) => result.status === 'fail')
    .map((result) => result.id);

/** The canvas-node v2 kit, behaviour included, on one node object. */
async function kitResults(node: CanvasNodeV2): Promise<Record<string, CheckResult>> {
  const results = await runChecks(
    contractChecks(canvasNodeKitV2, async () => node),
    { redactor: new EvidenceRedactor(), timeoutMs: 15_000, contextFor: (evidence) => ({ evidence }) },
  );
  return byId(results);
}

const refuseUnapproved = (context: CanvasNodeContextV2): void => {
  if (context.approvals.length === 0 || !context.approvals.every((decision) => decision.approved))
    throw new SigilError('forbidden', 'not approved', { details: { reason: 'approval_required' } });
};

/** What the writer below does once approved: out.txt gets params.text, the same every run. */
async function writeOut(context: CanvasNodeContextV2): Promise<Record<string, unknown>> {
  context.signal.throwIfAborted();
  await writeFile(join(context.workspace.dir, 'out.txt'), String(context.params.text));
  context.log('wrote out.txt');
  return { path: 'out.txt' };
}

/** A conforming `writes` node. */
const writer: CanvasNodeV2 = {
  specVersion: 'v2',
  nodeKind: 'test-write',
  description: 'Writes out.txt',
  effect: 'writes',
  params: z.object({ text: z.string() }).strict(),
  ports: () => ({ inputs: {}, outputs: { path: { type: 'string' } } }),
  example: { params: { text: 'hello' }, inputs: {} },
  run: async (context) => {
    context.signal.throwIfAborted();
    refuseUnapproved(context);
    return writeOut(context);
  },
};

/** A conforming `reads` node: its output is its input, upper-cased. */
const reader: CanvasNodeV2 = {
  specVersion: 'v2',
  nodeKind: 'test-read',
  description: 'Upper-cases its input',
  effect: 'reads',
  params: z.object({}).strict(),
  ports: () => ({ inputs: { text: { type: 'string' } }, outputs: { text: { type: 'string' } } }),
  example: { params: {}, inputs: { text: 'hello' } },
  run: async (context) => {
    context.signal.throwIfAborted();
    context.log('upper-casing');
    return { text: String(context.inputs.text).toUpperCase() };
  },
};

describe('canvas-node v2 kit behaviour', function () {
  this.timeout(120_000);

  it('passes conforming writes and reads nodes, each check that applies to them', async () => {
    const writes = await kitResults(writer);
    expect(failedIds(writes)).to.deep.equal([]);
    expect(writes['canvas-node.writes-need-approval']?.status).to.equal('pass');
    expect(writes['canvas-node.writes-once']?.status).to.equal('pass');
    expect(writes['canvas-node.reads-change-nothing']?.status).to.equal('not-applicable');
    const reads = await kitResults(reader);
    expect(failedIds(reads)).to.deep.equal([]);
    expect(reads['canvas-node.reads-change-nothing']?.status).to.equal('pass');
  });

  it('fails the careless-writer fixture, which writes without checking its approvals, through `sigil conformance plugin`', async () => {
    const report = await runPluginKit(
      await importPluginModule('./test/fixtures/canvas/careless-writer.ts', ROOT),
    );
    const results = byId(report.results);
    expect(failedIds(results)).to.deep.equal(['canvas-node.writes-need-approval']);
    expect(results['canvas-node.writes-need-approval']?.reason).to.equal(
      'run with no decision changed the workspace: git status went from "" to "?? careless.txt"; workspace/careless.txt appeared',
    );
  });

  it('fails a writes node that takes one approved decision for all, or refuses with another code', async () => {
    const lenient = await kitResults({
      ...writer,
      run: async (context) => {
        if (!context.approvals.some((decision) => decision.approved))
          throw new SigilError('forbidden', 'no', { details: { reason: 'approval_required' } });
        return writeOut(context);
      },
    });
    expect(failedIds(lenient)).to.deep.equal(['canvas-node.writes-need-approval']);
    expect(lenient['canvas-node.writes-need-approval']?.reason).to.equal(
      'run with an approved and a rejected decision changed the workspace: git status went from "" to "?? out.txt"; workspace/out.txt appeared',
    );
    const otherCode = await kitResults({
      ...writer,
      run: async (context) => {
        if (context.approvals.length === 0) throw new SigilError('unauthorized', 'sign in');
        return writeOut(context);
      },
    });
    expect(otherCode['canvas-node.writes-need-approval']?.reason).to.equal(
      'run with no decision rejected with SigilError unauthorized: sign in, not forbidden (approval_required)',
    );
  });

  it('fails a writes node that changes things again on a second run with the same key', async () => {
    const results = await kitResults({
      ...writer,
      run: async (context) => {
        context.signal.throwIfAborted();
        refuseUnapproved(context);
        await appendFile(join(context.workspace.dir, 'out.txt'), 'again\n');
        context.log('appended');
        return { path: 'out.txt' };
      },
    });
    expect(failedIds(results)).to.deep.equal(['canvas-node.writes-once']);
    expect(results['canvas-node.writes-once']?.reason).to.match(
      /^a second run with the same idempotencyKey changed the workspace: workspace\/out\.txt changed/,
    );
  });

  it('fails a node that does not stop on an aborted signal, or stops with a reason of its own', async () => {
    const ignoring = await kitResults({
      ...writer,
      run: async (context) => writer.run({ ...context, signal: new AbortController().signal }),
    });
    expect(failedIds(ignoring)).to.deep.equal(['canvas-node.abort']);
    expect(ignoring['canvas-node.abort']?.reason).to.equal(
      'run with an aborted signal changed the workspace: git status went from "" to "?? out.txt"; workspace/out.txt appeared',
    );
    const ownReason = await kitResults({
      ...reader,
      run: async (context) => {
        if (context.signal.aborted) throw new Error('stopped');
        return reader.run(context);
      },
    });
    expect(ownReason['canvas-node.abort']?.reason).to.equal(
      "run rejected with Error: stopped, not the signal's reason",
    );
  });

  it('fails a node that is not writes yet writes, in the workspace or beside it', async () => {
    for (const path of ['inside.txt', '../beside.txt']) {
      const results = await kitResults({
        ...reader,
        run: async (context) => {
          await writeFile(join(context.workspace.dir, path), 'x');
          return reader.run(context);
        },
      });
      expect(failedIds(results)).to.include('canvas-node.reads-change-nothing');
      expect(results['canvas-node.reads-change-nothing']?.reason).to.include(
        path === 'inside.txt' ? 'workspace/inside.txt appeared' : 'beside.txt appeared',
      );
    }
  });

  it('fails a node that puts a secret it was given in its log lines, base64-encoded, or in an error', async () => {
    const logging = await kitResults({
      ...reader,
      run: async (context) => {
        const token = await context.services.secret('FORGE_TOKEN');
        context.log('using the token', { basic: Buffer.from(`x:${token}`).toString('base64') });
        return reader.run(context);
      },
    });
    expect(failedIds(logging)).to.deep.equal(['canvas-node.no-secret']);
    expect(logging['canvas-node.no-secret']?.reason).to.equal('a secret it was given is in its log lines');
    const fromParams = await kitResults({
      ...reader,
      params: z.object({ apiKey: z.string() }).strict(),
      example: { params: { apiKey: 'sk-test-0123456789abcdef' }, inputs: { text: 'hi' } },
      run: async (context) => {
        throw new SigilError('unavailable', `the upstream refused ${String(context.params.apiKey)}`);
      },
    });
    expect(fromParams['canvas-node.no-secret']?.reason).to.equal('a secret it was given is in its error');
    // Neither the canary nor the param's key reached the results.
    expect(JSON.stringify(fromParams)).to.not.include('sk-test-0123456789abcdef');
  });

  it('fails outputs missing or of another type than their port, ports that change, and an undeclared example input', async () => {
    const outputs = await kitResults({
      ...reader,
      ports: () => ({
        inputs: { text: { type: 'string' } },
        outputs: { text: { type: 'number' }, extra: { type: 'files' } },
      }),
    });
    expect(outputs['canvas-node.run-outputs']?.reason).to.equal(
      'output "text" is not a number (Invalid input: expected number, received string); no value for output "extra"',
    );
    let calls = 0;
    const unstable = await kitResults({
      ...reader,
      ports: () => ({
        inputs: { text: { type: 'string' } },
        outputs: { [`out${(calls += 1)}`]: { type: 'json', required: false } },
      }),
    });
    expect(unstable['canvas-node.ports']?.reason).to.equal('ports(params) differs from one call to the next');
    const undeclared = await kitResults({
      ...reader,
      example: { params: {}, inputs: { text: 'hi', other: 1 } },
    });
    expect(undeclared['canvas-node.ports']?.reason).to.equal('example input "other" is no input port');
  });

  it('fails a node kind out of the rule, an unknown effect, and params that take anything', async () => {
    const results = await kitResults({
      ...reader,
      nodeKind: 'Write_Files',
      effect: 'sometimes' as CanvasNodeV2['effect'],
      params: z.unknown() as unknown as CanvasNodeV2['params'],
    });
    expect(failedIds(results)).to.include.members([
      'canvas-node.node-kind',
      'canvas-node.effect',
      'canvas-node.params',
    ]);
    expect(results['canvas-node.params']?.reason).to.equal('params accepts "params", 42, null, ["params"]');
  });

  it("does not apply what needs a successful run to a node refused by a service the kit lacks, and only for the kit's own refusal", async () => {
    const needsModel = await kitResults({
      ...reader,
      run: async (context) => {
        const { text } = await context.services.llm({ prompt: String(context.inputs.text) }, context.signal);
        context.log('drafted');
        return { text };
      },
    });
    expect(failedIds(needsModel)).to.deep.equal([]);
    expect(needsModel['canvas-node.run-outputs']?.status).to.equal('not-applicable');
    expect(needsModel['canvas-node.run-outputs']?.reason).to.match(
      /^run\(example\) needs a service of the host the kit does not provide \(SigilError unavailable \(kit_service_unavailable\)/,
    );
    expect(needsModel['canvas-node.abort']?.status).to.equal('pass');
    expect(needsModel['canvas-node.reads-change-nothing']?.status).to.equal('pass');
    const pretending = await kitResults({
      ...reader,
      run: async () => {
        throw new SigilError('unavailable', 'the kit provides no llm service', {
          details: { reason: 'kit_service_unavailable' },
        });
      },
    });
    expect(pretending['canvas-node.run-outputs']?.status).to.equal('fail');
    expect(pretending['canvas-node.log']?.status).to.equal('fail');
  });
});
