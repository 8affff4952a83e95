import { z } from 'zod';
import type { LlmModelInfo } from '../index.ts';

/**
 * Model catalogs in plugin options. JSON has no bigint, so a price is written as an integer number of
 * base units per million tokens (`150000` = 0.15 USD) or as a string of digits (`"150000"`), for
 * amounts beyond 2^53. Never a float: `0.15` is refused.
 */
export const priceOption = z
  .union([
    z
      .number()
      .int('an integer number of base units (1 USD = 1000000)')
      .nonnegative()
      .max(Number.MAX_SAFE_INTEGER),
    z.string().regex(/^\d{1,30}$/, 'a string of digits: base units (1 USD = 1000000)'),
  ])
  .transform((value) => BigInt(value));

const modelEntry = z
  .object({
    id: z.string().min(1).max(200),
    inputPricePerMTok: priceOption.optional(),
    outputPricePerMTok: priceOption.optional(),
  })
  .strict();

/**
 * The `models` option of a provider: entries `{ id, inputPricePerMTok?, outputPricePerMTok? }` that
 * replace the provider's default catalog. A price left out is the default catalog's for that id; an
 * id the defaults do not know needs both prices (a model is never free by omission). Absent: the
 * defaults.
 */
export function modelCatalogOption(defaults: readonly LlmModelInfo[]) {
  const known = new Map(defaults.map((model) => [model.id, model]));
  return z
    .array(modelEntry)
    .min(1)
    .optional()
    .superRefine((entries, ctx) => {
      const seen = new Set<string>();
      entries?.forEach((entry, index) => {
        if (seen.has(entry.id))
          ctx.addIssue({
            code: 'custom',
            path: [index, 'id'],
            message: `model "${entry.id}" is listed twice`,
          });
        seen.add(entry.id);
        if (known.has(entry.id)) return;
        for (const field of ['inputPricePerMTok', 'outputPricePerMTok'] as const)
          if (entry[field] === undefined)
            ctx.addIssue({
              code: 'custom',
              path: [index, field],
              message: `model "${entry.id}" has no default price: give ${field} in base units per million tokens`,
            });
      });
    })
    .transform((entries): LlmModelInfo[] =>
      entries === undefined
        ? defaults.map((model) => ({ ...model }))
        : entries.map((entry) => {
            const fallback = known.get(entry.id);
            return {
              id: entry.id,
              inputPricePerMTok: entry.inputPricePerMTok ?? fallback?.inputPricePerMTok ?? 0n,
              outputPricePerMTok: entry.outputPricePerMTok ?? fallback?.outputPricePerMTok ?? 0n,
            };
          }),
    );
}

/** Prices as a table in source: id → [input, output] base units per million tokens. */
export const catalogFrom = (table: Readonly<Record<string, readonly [bigint, bigint]>>): LlmModelInfo[] =>
  Object.entries(table).map(([id, [inputPricePerMTok, outputPricePerMTok]]) => ({
    id,
    inputPricePerMTok,
    outputPricePerMTok,
  }));
