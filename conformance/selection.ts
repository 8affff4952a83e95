import type { CheckInfo } from '@sigil/plugin-api/kit';

export interface Selection {
  /** Ids or prefixes to run; empty means all. */
  only: readonly string[];
  /** Ids or prefixes to leave out, applied after `only`. */
  skip: readonly string[];
}

/**
 * True when `pattern` names the id itself or a prefix of it ending at a separator, so `GW-5` selects
 * `GW-5.jwt-lifetime`, `GW` every gateway requirement, and `GW-5.erc8128` the ERC-8128 ones; `GW-4.he`
 * selects nothing, which keeps a typo from silently selecting a neighbour.
 */
export function matches(pattern: string, id: string): boolean {
  if (id === pattern) return true;
  return id.startsWith(pattern) && ['.', '-'].includes(id.charAt(pattern.length));
}

/** Patterns that match no check: a typo in `--only` or `--skip` is an error, not an empty run. */
export function unknownPatterns(checks: readonly CheckInfo[], selection: Selection): string[] {
  return [...selection.only, ...selection.skip].filter(
    (pattern) => !checks.some((check) => matches(pattern, check.id)),
  );
}

export function select<T extends CheckInfo>(checks: readonly T[], selection: Selection): T[] {
  return checks.filter(
    (check) =>
      (selection.only.length === 0 || selection.only.some((pattern) => matches(pattern, check.id))) &&
      !selection.skip.some((pattern) => matches(pattern, check.id)),
  );
}

/** Splits a comma-separated option value (`GW-5,RT-4.health`) into patterns. */
export function parseIdList(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item.length > 0);
}
