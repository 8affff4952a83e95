import {
  SigilError,
  type CanvasNodeContextV2,
  type CanvasNodeV2,
  type CanvasPortsV2,
} from '@sigil/plugin-api';
import { PORT_VALUE_SCHEMAS, renderTemplate, valueAt } from '@sigil/plugin-api/canvas';
import { paramsSchema, type TransformOutput, type TransformParams } from './params.ts';

/**
 * `transform`: picks, maps and templates values between nodes. It only reads dotted paths (with
 * `valueAt` and `renderTemplate`, which follow own properties only) and evaluates no expression, so
 * a workflow document cannot make it run code.
 */
export class TransformNode implements CanvasNodeV2<TransformParams> {
  readonly specVersion = 'v2';
  readonly nodeKind = 'transform';
  readonly description =
    'Picks, maps and templates values between nodes (dotted paths and {{…}} templates, no code), e.g. an LLM answer into files';
  readonly effect = 'none';
  readonly params = paramsSchema;
  readonly example = {
    params: {
      inputs: { page: 'string', draft: 'object' },
      outputs: {
        files: { type: 'files', files: [{ path: 'index.html', template: '{{inputs.page}}' }] },
        title: { type: 'string', from: 'inputs.draft.title' },
        summary: { type: 'string', template: '{{inputs.draft.title}}: {{inputs.draft.words}} words' },
      },
    },
    inputs: {
      page: '<!doctype html><title>Hello</title><h1>Hello</h1>',
      draft: { title: 'Hello', words: 1 },
    },
  };

  ports(params: TransformParams): CanvasPortsV2 {
    return {
      inputs: Object.fromEntries(Object.entries(params.inputs).map(([name, type]) => [name, { type }])),
      outputs: Object.fromEntries(
        Object.entries(params.outputs).map(([name, { type, description }]) => [
          name,
          { type, ...(description === undefined ? {} : { description }) },
        ]),
      ),
    };
  }

  async run(context: CanvasNodeContextV2<TransformParams>): Promise<Record<string, unknown>> {
    context.signal.throwIfAborted();
    const scope = { inputs: context.inputs };
    const outputs: Record<string, unknown> = {};
    for (const [name, output] of Object.entries(context.params.outputs)) {
      const value = valueOf(output, scope, name);
      const checked = PORT_VALUE_SCHEMAS[output.type].safeParse(value);
      if (!checked.success)
        throw new SigilError('invalid_request', `The output ${name} is not a value of type ${output.type}`, {
          details: {
            reason: 'output_type_mismatch',
            output: name,
            type: output.type,
            issues: checked.error.issues.map(({ path, message }) => ({ path, message })),
          },
        });
      outputs[name] = checked.data;
    }
    return outputs;
  }
}

function valueOf(output: TransformOutput, scope: { inputs: Record<string, unknown> }, name: string): unknown {
  if (output.from !== undefined) {
    const value = valueAt(scope, output.from);
    if (value === undefined)
      throw new SigilError('invalid_request', `The output ${name} reads ${output.from}, which has no value`, {
        details: { reason: 'value_missing', output: name, path: output.from },
      });
    return value;
  }
  if (output.template !== undefined) return renderTemplate(output.template, scope);
  if (output.files !== undefined) {
    const files = output.files.map((file) => ({
      path: renderTemplate(file.path, scope),
      content: renderTemplate(file.template, scope),
    }));
    const paths = files.map((file) => file.path);
    const repeated = paths.find((path, index) => paths.indexOf(path) !== index);
    if (repeated !== undefined)
      throw new SigilError('invalid_request', `The output ${name} makes ${repeated} twice`, {
        details: { reason: 'duplicate_path', output: name, path: repeated },
      });
    return files;
  }
  return output.value;
}
