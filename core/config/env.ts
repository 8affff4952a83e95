/** Turns an environment variable's text into the value its config path takes (zod checks it after). */
export type Coerce = (raw: string) => unknown;

export const asString: Coerce = (raw) => raw;
export const asInt: Coerce = (raw) => (/^\d+$/.test(raw) ? Number(raw) : raw);
export const asBool: Coerce = (raw) =>
  ['true', '1', 'yes'].includes(raw) ? true : ['false', '0', 'no'].includes(raw) ? false : raw;
export const asList: Coerce = (raw) =>
  raw
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);

/** Environment variables, each with the config path it sets. */
export type EnvOverrides = Record<string, { path: string; coerce: Coerce }>;
