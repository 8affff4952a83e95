import { isDeepStrictEqual } from 'node:util';
import { z } from 'zod';
import { PORT_VALUE_SCHEMAS } from '../canvas/ports.ts';
import { isSigilError } from '../errors.ts';
import { NODE_KIND_RULE } from '../extensions.ts';
import type {
  CanvasApprovalV2,
  CanvasNodeEffect,
  CanvasNodeV2,
  CanvasPortType,
  CanvasPortV2,
} from '../index.ts';
import { approvedDecision } from './canvas-node-context.ts';
import {
  type CanvasNodeContext,
  exampleOf,
  exampleParams,
  KIT_APPROVAL_ID,
  type NodeHarness,
  type NodeRun,
  outputsOf,
  rejectedDecision,
  withNodeHarness,
} from './canvas-node-harness.ts';
import { stateChanges } from './canvas-workspace-state.ts';
import { ensure, expectShape, notApplicableBecause, pass } from './check.ts';
import type { InstanceCheck } from './kit.ts';

/**
 * The checks of `canvas-node` v2's promises, one per sentence of the doc comment of CanvasNodeV2: each
 * runs the node's own example in a fresh git workspace (canvas-node-harness.ts) and looks at what it
 * resolved to, what it logged, and what changed on disk. What a generic kit cannot see (a forge, a
 * served page) the node's own tests check.
 */

const CONTRACT = 'packages/plugin-api/src/contracts/canvas-node-v2.ts';

type CanvasCheck = InstanceCheck<CanvasNodeV2>;

const EFFECTS: readonly CanvasNodeEffect[] = ['none', 'reads', 'writes', 'approval'];
const PORT_TYPES = Object.keys(PORT_VALUE_SCHEMAS) as [CanvasPortType, ...CanvasPortType[]];

const portSchema = z.object({
  type: z.enum(PORT_TYPES),
  required: z.boolean().optional(),
  description: z.string().optional(),
});
const portsSchema = z.object({
  inputs: z.record(z.string(), portSchema),
  outputs: z.record(z.string(), portSchema),
});

/** Values the contract's "an object schema" must refuse as params. */
const NOT_OBJECTS: readonly unknown[] = ['params', 42, null, ['params']];

const logLineSchema = z.object({
  message: z.string().min(1),
  data: z.record(z.string(), z.json()).optional(),
});

/** Why `value` is not a value of `port`'s type, or undefined when it is. */
function portValueProblem(port: CanvasPortV2, value: unknown): string | undefined {
  const parsed = PORT_VALUE_SCHEMAS[port.type].safeParse(value);
  return parsed.success ? undefined : `not a ${port.type} (${parsed.error.issues[0]?.message ?? 'invalid'})`;
}

function portsOf({ instance, evidence }: CanvasNodeContext, params: Record<string, unknown>) {
  const ports: unknown = instance.ports(params);
  evidence.note('ports(example.params)', ports);
  return expectShape(portsSchema, ports, 'ports(example.params)');
}

/** Ends the check as not applicable unless the node's effect is `writes` (`only`) or is not (`except`). */
function writesOnly(instance: CanvasNodeV2, writes: boolean): void {
  if ((instance.effect === 'writes') !== writes)
    notApplicableBecause(`the node's effect is ${instance.effect}`);
}

/** Runs the example, then fails the check when the workspace or the folder around it changed. */
async function unchangedBy(harness: NodeHarness, what: string, run: () => Promise<NodeRun>) {
  const before = await harness.state();
  const result = await run();
  const changes = stateChanges(before, await harness.state());
  ensure(changes.length === 0, `${what} changed the workspace: ${changes.join('; ')}`);
  return result;
}

/** The text of an error a reader of events sees: its message, hint, details and causes. */
function errorText(error: unknown, depth = 0): string {
  if (typeof error !== 'object' || error === null || depth > 3) return String(error);
  const { message, hint, details, cause } = error as Record<string, unknown>;
  return JSON.stringify({
    message,
    hint,
    details,
    cause: cause === undefined ? undefined : errorText(cause, depth + 1),
  });
}

const requiredApprovalRefusal = (error: unknown): boolean =>
  isSigilError(error) && error.code === 'forbidden' && error.details?.reason === 'approval_required';

export const canvasNodeV2Checks: readonly CanvasCheck[] = [
  {
    id: 'canvas-node.node-kind',
    level: 'MUST',
    title: `nodeKind is ${NODE_KIND_RULE.says}`,
    spec: `${CONTRACT}: "names its kind in lowercase letters, digits and dashes (\`write-files\`, \`browser-verify\`)"`,
    check: async ({ instance }) => {
      ensure(
        NODE_KIND_RULE.pattern.test(instance.nodeKind),
        `nodeKind "${instance.nodeKind}" is not ${NODE_KIND_RULE.says}`,
      );
      return pass();
    },
  },
  {
    id: 'canvas-node.effect',
    level: 'MUST',
    title: `effect is one of ${EFFECTS.join(', ')}`,
    spec: `${CONTRACT}: effect, "What the node does beyond computing its outputs, which the executor enforces": none, reads, writes or approval`,
    check: async ({ instance }) => {
      ensure(
        EFFECTS.includes(instance.effect),
        `effect "${String(instance.effect)}" is none of ${EFFECTS.join(', ')}`,
      );
      return pass();
    },
  },
  {
    id: 'canvas-node.params',
    level: 'MUST',
    title:
      'params is a zod schema of objects: it accepts example.params, refuses a string, a number, null and an array',
    spec: `${CONTRACT}: "parses its params with \`params\` (a zod schema), so a document's bad params are refused at validation"; params, "an object schema"`,
    check: async ({ instance, evidence }) => {
      ensure(typeof instance.params?.safeParse === 'function', 'params has no safeParse: not a zod schema');
      exampleParams(instance);
      const accepted = NOT_OBJECTS.filter((value) => instance.params.safeParse(value).success);
      evidence.note('params accepted of the non-objects', accepted);
      ensure(
        accepted.length === 0,
        `params accepts ${accepted.map((value) => JSON.stringify(value)).join(', ')}`,
      );
      return pass();
    },
  },
  {
    id: 'canvas-node.ports',
    level: 'MUST',
    title:
      "ports(params) declares ports of the known types, the same on every call, and every input the example gives, each value of its port's type, every required one among them",
    spec: `${CONTRACT}: "declares its ports for given params with \`ports\`, the same every call for the same params"; example, "Params and inputs the node runs with"`,
    check: async (context) => {
      const { instance } = context;
      const ports = portsOf(context, exampleParams(instance));
      ensure(
        isDeepStrictEqual(instance.ports(exampleParams(instance)), instance.ports(exampleParams(instance))),
        'ports(params) differs from one call to the next',
      );
      const { inputs } = exampleOf(instance);
      const problems = [
        ...Object.keys(inputs)
          .filter((name) => ports.inputs[name] === undefined)
          .map((name) => `example input "${name}" is no input port`),
        ...Object.entries(ports.inputs).flatMap(([name, port]) => {
          if (inputs[name] === undefined)
            return port.required === false ? [] : [`the example gives no value for required input "${name}"`];
          const problem = portValueProblem(port, inputs[name]);
          return problem === undefined ? [] : [`example input "${name}" is ${problem}`];
        }),
      ];
      ensure(problems.length === 0, problems.join('; '));
      return pass();
    },
  },
  {
    id: 'canvas-node.run-outputs',
    level: 'MUST',
    title:
      "run(example) resolves to an object with a value of the port's type for every required output port",
    spec: `${CONTRACT}: "resolves \`run\` to an object with a value for each required output port, of the port's type"`,
    check: async (context) =>
      withNodeHarness(context, async (harness) => {
        const ports = portsOf(context, harness.params);
        const outputs = outputsOf(await harness.run(), 'run(example)');
        ensure(
          typeof outputs === 'object' && outputs !== null && !Array.isArray(outputs),
          `run(example) resolved to ${JSON.stringify(outputs)}, not an object`,
        );
        const problems = Object.entries(ports.outputs).flatMap(([name, port]) => {
          if (outputs[name] === undefined)
            return port.required === false ? [] : [`no value for output "${name}"`];
          const problem = portValueProblem(port, outputs[name]);
          return problem === undefined ? [] : [`output "${name}" is ${problem}`];
        });
        ensure(problems.length === 0, problems.join('; '));
        return pass();
      }),
  },
  {
    id: 'canvas-node.log',
    level: 'SHOULD',
    title:
      'run(example) reports progress through log: each line a message with JSON data, and at least one from a node that reads or writes',
    spec: `${CONTRACT}: "and reports progress through \`log\`"`,
    check: async (context) =>
      withNodeHarness(context, async (harness) => {
        const run = await harness.run();
        // Silence is excused only when the run could not get going for want of a host service.
        if (run.logs.length === 0) outputsOf(run, 'run(example)');
        const reachesOut = context.instance.effect === 'reads' || context.instance.effect === 'writes';
        ensure(
          run.logs.length > 0 || !reachesOut,
          `a ${context.instance.effect} node's run(example) logged nothing`,
        );
        const bad = run.logs.filter((line) => !logLineSchema.safeParse(line).success);
        ensure(
          bad.length === 0,
          `log lines without a message or with data that is not a JSON object: ${bad.length}`,
        );
        return pass();
      }),
  },
  {
    id: 'canvas-node.abort',
    level: 'MUST',
    title: "run with a signal aborted already rejects with the signal's reason, and changes nothing",
    spec: `${CONTRACT}: "stops when \`signal\` aborts (cancellation, a timeout), rejecting with the signal's reason, and changes nothing after it"`,
    check: async (context) =>
      withNodeHarness(context, async (harness) => {
        const controller = new AbortController();
        const reason = new Error('cancelled by the canvas-node kit');
        controller.abort(reason);
        const run = await unchangedBy(harness, 'run with an aborted signal', () =>
          harness.run({ signal: controller.signal }),
        );
        ensure('error' in run.outcome, 'run resolved although its signal had aborted');
        ensure(run.outcome.error === reason, `run rejected with ${run.rejection}, not the signal's reason`);
        ensure(run.artifacts === 0, `run stored ${run.artifacts} artifact(s) after its signal aborted`);
        return pass();
      }),
  },
  {
    id: 'canvas-node.writes-need-approval',
    level: 'MUST',
    title:
      'a writes node refuses, forbidden with reason approval_required and changing nothing, without a decision, with a rejected one, and with one approved beside one rejected',
    spec: `${CONTRACT}: "when \`effect\` is \`writes\`: refuses to run, rejecting with a SigilError \`forbidden\` whose \`details.reason\` is \`approval_required\` and changing nothing, unless \`approvals\` holds at least one decision and every one approved"`,
    check: async (context) => {
      writesOnly(context.instance, true);
      return withNodeHarness(context, async (harness) => {
        const cases: [string, CanvasApprovalV2[]][] = [
          ['no decision', []],
          ['a rejected decision', [rejectedDecision()]],
          ['an approved and a rejected decision', [approvedDecision(KIT_APPROVAL_ID), rejectedDecision()]],
        ];
        for (const [what, approvals] of cases) {
          const run = await unchangedBy(harness, `run with ${what}`, () => harness.run({ approvals }));
          ensure('error' in run.outcome, `run with ${what} resolved`);
          ensure(
            requiredApprovalRefusal(run.outcome.error),
            `run with ${what} rejected with ${run.rejection}, not forbidden (approval_required)`,
          );
          ensure(run.artifacts === 0, `run with ${what} stored ${run.artifacts} artifact(s)`);
        }
        return pass();
      });
    },
  },
  {
    id: 'canvas-node.writes-once',
    level: 'MUST',
    title:
      'a writes node run twice with the same idempotencyKey resolves both times, and the second run changes nothing in the workspace',
    spec: `${CONTRACT}: "and changes things at most once per \`idempotencyKey\` (a run that crashed while the node ran calls it again with the same key)"`,
    check: async (context) => {
      writesOnly(context.instance, true);
      return withNodeHarness(context, async (harness) => {
        const before = await harness.state();
        const first = await harness.run();
        const changed = stateChanges(before, await harness.state()).length > 0;
        // A first run refused by a host service that changed things anyway is still checked: the
        // second run must not add to them. One that changed nothing leaves nothing to check.
        if (!(first.needsHostService && changed)) outputsOf(first, 'the first run(example)');
        const second = await unchangedBy(harness, 'a second run with the same idempotencyKey', () =>
          harness.run(),
        );
        if (!second.needsHostService) outputsOf(second, 'a second run with the same idempotencyKey');
        return pass();
      });
    },
  },
  {
    id: 'canvas-node.reads-change-nothing',
    level: 'MUST',
    title:
      'a node whose effect is not writes changes nothing in the workspace (or beside it) when it runs its example',
    spec: `${CONTRACT}: "when \`effect\` is not \`writes\`: changes nothing in \`workspace\` or outside the run"`,
    check: async (context) => {
      writesOnly(context.instance, false);
      return withNodeHarness(context, async (harness) => {
        // Whether it resolved or not: what matters is that it changed nothing.
        await unchangedBy(harness, 'run(example)', () => harness.run());
        return pass();
      });
    },
  },
  {
    id: 'canvas-node.no-secret',
    level: 'MUST',
    title:
      "no secret the node was given (secret()'s answer, a secret-named param of the example), in any encoding, is in its outputs, log lines or error",
    spec: `${CONTRACT}: "never puts a secret it was given (\`secret\`, a key in params) in its outputs, logs or errors"`,
    check: async (context) =>
      withNodeHarness(context, async (harness) => {
        const run = await harness.run();
        if (!harness.hasSecrets())
          notApplicableBecause('run(example) asked for no secret, and the example has no secret-named param');
        const places: [string, string][] = [
          ['outputs', 'outputs' in run.outcome ? JSON.stringify(run.outcome.outputs) : ''],
          ['log lines', JSON.stringify(run.logs)],
          ['error', 'error' in run.outcome ? errorText(run.outcome.error) : ''],
        ];
        const leaks = places.filter(([, text]) => harness.holdsSecret(text)).map(([place]) => place);
        ensure(leaks.length === 0, `a secret it was given is in its ${leaks.join(', ')}`);
        return pass();
      }),
  },
];
