import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';
import { remoteUrlProblem, requireRemoteUrl } from '@sigil/plugin-api/canvas';

/**
 * The operator's allow-list of remotes: URL prefixes ending in `/` (`https://github.com/`,
 * `https://git.example.com/team/`). A remote is allowed when its normalized URL starts with one, so
 * `https://github.com.evil.example/` or `https://github.com/../` never pass for `https://github.com/`.
 */
export const REMOTE_PREFIX = z
  .string()
  .superRefine((prefix, context) => {
    const problem = remoteUrlProblem(prefix) ?? (prefix.endsWith('/') ? undefined : 'a prefix ends in /');
    if (problem !== undefined) context.addIssue({ code: 'custom', message: problem });
  })
  .transform((prefix) => new URL(prefix).href);

/** Public forges over https: pushing there reaches nothing of the operator's network. */
export const DEFAULT_ALLOWED_REMOTES = [
  'https://github.com/',
  'https://gitlab.com/',
  'https://codeberg.org/',
];

/** The remote as git gets it (normalized: no `..`, lowercase host) when it starts with one of `prefixes`. */
export function allowedRemote(url: URL, prefixes: readonly string[]): string | undefined {
  return prefixes.some((prefix) => url.href.startsWith(prefix)) ? url.href : undefined;
}

/** `allowedRemote`, refused unless the remote is a remote URL and listed. Errors name its host, never the URL. */
export function requireAllowedRemote(remote: string, prefixes: readonly string[]): string {
  const url = requireRemoteUrl(remote);
  const href = allowedRemote(url, prefixes);
  if (href !== undefined) return href;
  throw new SigilError(
    'forbidden',
    `The remote on ${url.host} is not on the operator's list of allowed remotes`,
    {
      hint: "An operator lists the remotes nodes may push to in the canvas-git plugin's allowedRemotes option",
      details: { reason: 'remote_not_allowed', host: url.host },
    },
  );
}
