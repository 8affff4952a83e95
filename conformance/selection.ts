import type { CheckInfo } from '@sigil/plugin-api/kit';

export interface Selection {
  /** Ids, prefixes or groups to run; empty means all. */
  only: readonly string[];
  /** Ids, prefixes or groups to leave out, applied after `only`. */
  skip: readonly string[];
}

/** A check as a tester selects it: by its id, a prefix of it, or a group it belongs to. */
export interface Selectable extends CheckInfo {
  /** Named sets a tester selects or leaves out as a whole (`--skip tee`). */
  groups?: readonly string[];
}

/** A check in the run's scope that `--skip` left out: the report lists it as excluded on request. */
export interface Exclusion extends CheckInfo {
  /** The `--skip` pattern that left it out. */
  excludedBy: string;
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

/** True when `pattern` matches the check's id (see {@link matches}) or names one of its groups. */
export function selects(pattern: string, check: Selectable): boolean {
  return matches(pattern, check.id) || (check.groups ?? []).includes(pattern);
}

/** Patterns that match no check: a typo in `--only` or `--skip` is an error, not an empty run. */
export function unknownPatterns(checks: readonly Selectable[], selection: Selection): string[] {
  return [...selection.only, ...selection.skip].filter(
    (pattern) => !checks.some((check) => selects(pattern, check)),
  );
}

const inScope = (check: Selectable, selection: Selection): boolean =>
  selection.only.length === 0 || selection.only.some((pattern) => selects(pattern, check));

const skippedBy = (check: Selectable, selection: Selection): string | undefined =>
  selection.skip.find((pattern) => selects(pattern, check));

export function select<T extends Selectable>(checks: readonly T[], selection: Selection): T[] {
  return checks.filter((check) => inScope(check, selection) && skippedBy(check, selection) === undefined);
}

/** The checks `--only` (or its absence) took in and `--skip` then left out, each with its pattern. */
export function exclusions(checks: readonly Selectable[], selection: Selection): Exclusion[] {
  return checks.flatMap((check) => {
    const pattern = inScope(check, selection) ? skippedBy(check, selection) : undefined;
    if (pattern === undefined) return [];
    const { id, level, title, spec } = check;
    return [{ id, level, title, spec, excludedBy: pattern }];
  });
}

/** Splits a comma-separated option value (`GW-5,RT-4.health`) into patterns. */
export function parseIdList(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item.length > 0);
}
