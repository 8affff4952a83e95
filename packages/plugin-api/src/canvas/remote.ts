import { z } from 'zod';
import { SigilError } from '../errors.ts';

/**
 * What a canvas node may push to: an `https`, `http` or `git` URL with no credentials in it (a token
 * travels in a header, from a slot of the wallet's vault), and a branch name git accepts; and how long
 * each exchange with it may take.
 */
const REMOTE_PROTOCOLS = new Set(['https:', 'http:', 'git:']);

/** Why `remote` is not a URL a node may push to, or undefined when it is. */
export function remoteUrlProblem(remote: string): string | undefined {
  if (!URL.canParse(remote)) return 'it is not a URL';
  const url = new URL(remote);
  if (!REMOTE_PROTOCOLS.has(url.protocol)) return 'only https, http and git remotes are allowed';
  if (url.username !== '' || url.password !== '')
    return 'credentials never go in the URL: name a vault slot (tokenSlot) instead';
  if (url.search !== '' || url.hash !== '') return 'a remote has no query or fragment';
  return undefined;
}

/** The remote, parsed; an `invalid_request` (reason `remote_invalid`) when `remoteUrlProblem` finds one. */
export function requireRemoteUrl(remote: string): URL {
  const problem = remoteUrlProblem(remote);
  if (problem !== undefined)
    throw new SigilError('invalid_request', `The remote cannot be pushed to: ${problem}`, {
      details: { reason: 'remote_invalid' },
    });
  return new URL(remote);
}

/** A remote's URL in params, refused at validation unless `remoteUrlProblem` finds nothing. */
export const REMOTE_URL = z
  .string()
  .max(2048)
  .superRefine((remote, context) => {
    const problem = remoteUrlProblem(remote);
    if (problem !== undefined) context.addIssue({ code: 'custom', message: problem });
  });

const isBranchName = (name: string): boolean =>
  /^[A-Za-z0-9._/-]+$/.test(name) &&
  !name.includes('..') &&
  name
    .split('/')
    .every(
      (segment) =>
        segment !== '' && !segment.startsWith('.') && !segment.startsWith('-') && !segment.endsWith('.lock'),
    ) &&
  !name.endsWith('.');

/** A branch name (`main`, `sigil/page`): letters, digits, `._/-`, in the shape `git check-ref-format` accepts. */
export const BRANCH_NAME = z
  .string()
  .min(1)
  .max(200)
  .refine(isBranchName, 'a branch name: letters, digits and ._/- (no .., no segment starting with . or -)');

/** An operator's bound on each exchange with a remote, in milliseconds: 1 s to 10 min, 2 min by default. */
export const REMOTE_TIMEOUT_MS = z.number().int().min(1_000).max(600_000).default(120_000);

/** A slot of the wallet's vault by name, e.g. the one holding a forge token (`GITHUB_TOKEN`). */
export const VAULT_SLOT = z.string().min(1).max(128);
