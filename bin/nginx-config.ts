import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SigilError } from '@sigil/plugin-api';
import { REPOSITORY_ROOT } from '../core/layout.ts';

/** The shipped nginx configuration: the template and its snippets (deploy/README.md). */
export const DEPLOY_NGINX = join(REPOSITORY_ROOT, 'deploy', 'nginx');

/** The replicas' addresses (host:port) of each service. */
export interface Upstreams {
  runtime: readonly string[];
  gateway: readonly string[];
}

/** Where nginx listens for each service: a port, or address:port. */
export interface Listens {
  runtimeListen: string;
  gatewayListen: string;
}

/**
 * The template filled in as deploy/README.md says: each line holding a replica placeholder once per
 * address of that service, the listen placeholders replaced.
 */
export function fillNginxTemplate(template: string, values: Upstreams & Listens): string {
  return template
    .split('\n')
    .flatMap((line) => {
      for (const service of ['runtime', 'gateway'] as const) {
        const placeholder = `{{${service}}}`;
        if (line.includes(placeholder))
          return values[service].map((address) => line.replace(placeholder, address));
      }
      return [line];
    })
    .join('\n')
    .replaceAll('{{runtime_listen}}', values.runtimeListen)
    .replaceAll('{{gateway_listen}}', values.gatewayListen);
}

/** The shipped template filled in for these replicas. */
export function shippedNginxConfig(values: Upstreams & Listens): string {
  return fillNginxTemplate(readFileSync(join(DEPLOY_NGINX, 'sigil.conf.template'), 'utf8'), values);
}

/**
 * Writes the filled template and the snippets it includes into an nginx configuration folder laid
 * out as Debian's (/etc/nginx): `conf.d/sigil.conf` and `snippets/sigil-*.conf`. Answers the files.
 */
export function writeNginxConfig(dir: string, values: Upstreams & Listens): string[] {
  const written: string[] = [];
  const write = (file: string, text: string) => {
    mkdirSync(join(dir, file, '..'), { recursive: true });
    writeFileSync(join(dir, file), text);
    written.push(join(dir, file));
  };
  write(join('conf.d', 'sigil.conf'), shippedNginxConfig(values));
  for (const snippet of readdirSync(join(DEPLOY_NGINX, 'snippets')))
    write(join('snippets', snippet), readFileSync(join(DEPLOY_NGINX, 'snippets', snippet), 'utf8'));
  return written;
}

/** `host:port` addresses from a comma-separated option; a clear error for anything else. */
export function replicaAddresses(option: string, list: string): string[] {
  const addresses = list
    .split(',')
    .map((address) => address.trim())
    .filter(Boolean);
  const bad = addresses.filter((address) => !/^[^\s:/]+:\d{1,5}$|^\[[0-9a-f:]+\]:\d{1,5}$/i.test(address));
  if (addresses.length === 0 || bad.length > 0)
    throw new SigilError(
      'invalid_request',
      `${option} takes the replicas' addresses as host:port, separated by commas${bad.length > 0 ? `; not one: ${bad.join(', ')}` : ''}`,
      { hint: `e.g. ${option} 127.0.0.1:8081,127.0.0.1:8082` },
    );
  return addresses;
}
