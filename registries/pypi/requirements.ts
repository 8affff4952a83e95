import * as pep440 from '@renovatebot/pep440';

/**
 * PEP 508 dependency specifiers as wheels write them in `Requires-Dist`, and the environment markers
 * that say where each applies. Hand-written: no maintained npm package parses PEP 508, and an
 * installer needs only the name-based form (a direct URL would leave the configured index).
 */

/** PEP 503 normalised name: runs of `-`, `_`, `.` become one `-`, lowercase. */
export const normalizeName = (name: string): string => name.replace(/[-_.]+/g, '-').toLowerCase();

/** PEP 508 project names: ASCII letters and digits, with `.`, `_`, `-` inside. */
export const PROJECT_NAME = /^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$/;

export interface Requirement {
  name: string;
  extras: string[];
  /** A PEP 440 specifier set (`>=1.0,<2`), empty for any version. */
  specifier: string;
  marker: Marker | undefined;
}

/** Parses one `Requires-Dist` value; throws a RangeError saying what is wrong. */
export function parseRequirement(text: string): Requirement {
  const semicolon = text.indexOf(';');
  const head = (semicolon < 0 ? text : text.slice(0, semicolon)).trim();
  const markerText = semicolon < 0 ? '' : text.slice(semicolon + 1).trim();
  const match = /^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*)$/.exec(head);
  if (!match || !PROJECT_NAME.test(match[1] ?? '')) throw new RangeError(`not a requirement: ${text}`);
  let specifier = (match[3] ?? '').trim();
  if (specifier.startsWith('@')) throw new RangeError(`a direct URL requirement leaves the index: ${text}`);
  if (specifier.startsWith('(') && specifier.endsWith(')')) specifier = specifier.slice(1, -1).trim();
  if (specifier !== '' && !pep440.validRange(specifier)) {
    throw new RangeError(`not a PEP 440 specifier: ${specifier} (in ${text})`);
  }
  return {
    name: match[1] ?? '',
    extras: (match[2] ?? '')
      .split(',')
      .map((extra) => extra.trim())
      .filter(Boolean)
      .map(normalizeName),
    specifier: specifier.replace(/\s+/g, ''),
    marker: markerText === '' ? undefined : parseMarker(markerText),
  };
}

export type Marker =
  | { op: 'and' | 'or'; left: Marker; right: Marker }
  | { op: 'compare'; left: MarkerValue; comparator: string; right: MarkerValue };
type MarkerValue = { variable: string } | { literal: string };

const VARIABLES = new Set([
  'implementation_name',
  'implementation_version',
  'os_name',
  'platform_machine',
  'platform_python_implementation',
  'platform_release',
  'platform_system',
  'platform_version',
  'python_full_version',
  'python_version',
  'sys_platform',
  'extra',
  // Legacy spellings that PEP 508 still asks installers to accept.
  'os.name',
  'sys.platform',
  'platform.version',
  'platform.machine',
  'platform.python_implementation',
  'python_implementation',
]);
const LEGACY: Record<string, string> = {
  'os.name': 'os_name',
  'sys.platform': 'sys_platform',
  'platform.version': 'platform_version',
  'platform.machine': 'platform_machine',
  'platform.python_implementation': 'platform_python_implementation',
  python_implementation: 'platform_python_implementation',
};

const TOKEN =
  /\s*(?:(\()|(\))|'([^']*)'|"([^"]*)"|(===|==|!=|<=|>=|~=|<|>)|(not\s+in\b)|([A-Za-z_][A-Za-z0-9_.]*))/y;

type Token = { kind: 'open' | 'close' } | { kind: 'string'; value: string } | { kind: 'word'; value: string };

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < text.length) {
    if (/^\s*$/.test(text.slice(TOKEN.lastIndex))) break;
    const start = TOKEN.lastIndex;
    const m = TOKEN.exec(text);
    if (!m) throw new RangeError(`cannot read the marker at "${text.slice(start)}": ${text}`);
    if (m[1]) tokens.push({ kind: 'open' });
    else if (m[2]) tokens.push({ kind: 'close' });
    else if (m[3] !== undefined || m[4] !== undefined)
      tokens.push({ kind: 'string', value: m[3] ?? m[4] ?? '' });
    else tokens.push({ kind: 'word', value: (m[5] ?? m[6] ?? m[7] ?? '').replace(/\s+/g, ' ') });
  }
  return tokens;
}

/** Parses a PEP 508 environment marker (`python_version >= "3.8" and extra == "cli"`). */
export function parseMarker(text: string): Marker {
  const tokens = tokenize(text);
  let at = 0;
  const fail = (what: string): never => {
    throw new RangeError(`${what} in the marker: ${text}`);
  };
  const word = (value: string) => {
    const token = tokens[at];
    return token?.kind === 'word' && token.value === value;
  };
  const value = (): MarkerValue => {
    const token = tokens[at++];
    if (token?.kind === 'string') return { literal: token.value };
    if (token?.kind === 'word' && VARIABLES.has(token.value)) {
      return { variable: LEGACY[token.value] ?? token.value };
    }
    return fail(`unknown variable ${token && 'value' in token ? token.value : 'at the end'}`);
  };
  const expression = (): Marker => {
    if (tokens[at]?.kind === 'open') {
      at += 1;
      const inner = or();
      if (tokens[at++]?.kind !== 'close') fail('a missing )');
      return inner;
    }
    const left = value();
    const op = tokens[at++];
    if (op?.kind !== 'word' || !/^(===|==|!=|<=|>=|~=|<|>|in|not in)$/.test(op.value)) {
      return fail('a missing comparison');
    }
    return { op: 'compare', left, comparator: op.value, right: value() };
  };
  const chain = (joiner: 'and' | 'or', operand: () => Marker) => (): Marker => {
    let left = operand();
    while (word(joiner)) {
      at += 1;
      left = { op: joiner, left, right: operand() };
    }
    return left;
  };
  const and = chain('and', expression);
  const or = chain('or', and);
  const marker = or();
  if (at !== tokens.length) fail('something left over');
  return marker;
}

const VERSION_VARIABLES = new Set(['python_version', 'python_full_version', 'implementation_version']);

/**
 * Evaluates a marker in `environment`. Version comparisons use PEP 440 when both sides are versions
 * (so `python_version >= "3.10"` holds for 3.11); anything else compares as strings, as PEP 508 says.
 * `extra` compares normalised names (PEP 685).
 */
export function evaluateMarker(marker: Marker, environment: Readonly<Record<string, string>>): boolean {
  if (marker.op !== 'compare') {
    const left = evaluateMarker(marker.left, environment);
    return marker.op === 'and'
      ? left && evaluateMarker(marker.right, environment)
      : left || evaluateMarker(marker.right, environment);
  }
  const isExtra = [marker.left, marker.right].some((side) => 'variable' in side && side.variable === 'extra');
  const resolve = (side: MarkerValue): string => {
    const text = 'literal' in side ? side.literal : (environment[side.variable] ?? '');
    return isExtra ? normalizeName(text) : text;
  };
  const left = resolve(marker.left);
  const right = resolve(marker.right);
  const versions = [marker.left, marker.right].some(
    (side) => 'variable' in side && VERSION_VARIABLES.has(side.variable),
  );
  switch (marker.comparator) {
    case 'in':
      return right.includes(left);
    case 'not in':
      return !right.includes(left);
    case '===':
      return left === right;
  }
  if (versions && pep440.valid(left) && pep440.validRange(`${marker.comparator}${right}`)) {
    return pep440.satisfies(left, `${marker.comparator}${right}`);
  }
  switch (marker.comparator) {
    case '==':
      return left === right;
    case '!=':
      return left !== right;
    case '<':
      return left < right;
    case '<=':
      return left <= right;
    case '>':
      return left > right;
    case '>=':
      return left >= right;
    default:
      // `~=` between non-versions: PEP 508 leaves it undefined; an installer refuses it.
      throw new RangeError(`${marker.comparator} needs versions, not "${left}" and "${right}"`);
  }
}
