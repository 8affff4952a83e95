import type { IncomingHttpHeaders } from 'node:http';
import type { SigilError } from '@sigil/plugin-api';
import type { AuthChallenge } from '../http/errors.ts';
import type { AuthSettings } from './settings.ts';

/** Where a protected resource publishes its RFC 9728 metadata, below its base URL. */
export const PROTECTED_RESOURCE_PATH = '/.well-known/oauth-protected-resource';

/**
 * The service's base URL as this request reached it: the public URL when configured, else the request's
 * Host, which the edge has already checked against the names the service answers for.
 */
export function requestBaseUrl(settings: AuthSettings, headers: IncomingHttpHeaders): string {
  if (settings.publicUrlConfigured || headers.host === undefined) return settings.baseUrl;
  return `http://${headers.host}`;
}

/** RFC 6750 allows only printable ASCII without `"` and `\` in an error description. */
const descriptionOf = (message: string): string =>
  message.replace(/"/g, "'").replace(/[^\x20-\x7e]|\\/g, ' ');

const presentsCredentials = (headers: IncomingHttpHeaders): boolean =>
  headers.authorization !== undefined ||
  headers.signature !== undefined ||
  headers['signature-input'] !== undefined;

/**
 * The `WWW-Authenticate` of the service's 401s (RFC 6750, and the MCP authorization spec): where its
 * protected-resource metadata is (the gateway), and, when the request carried credentials,
 * `invalid_token` with the reason they were refused, so a client shows that instead of starting an
 * OAuth flow the service does not offer.
 */
export function bearerChallenge(settings: AuthSettings, resourceMetadata: boolean): AuthChallenge {
  return (error: SigilError, headers: IncomingHttpHeaders) => {
    const params = [`realm="sigil-${settings.service}"`];
    if (resourceMetadata)
      params.push(`resource_metadata="${requestBaseUrl(settings, headers)}${PROTECTED_RESOURCE_PATH}"`);
    if (presentsCredentials(headers))
      params.push('error="invalid_token"', `error_description="${descriptionOf(error.message)}"`);
    return `Bearer ${params.join(', ')}`;
  };
}
