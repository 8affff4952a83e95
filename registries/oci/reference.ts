import { invalidRequest } from './errors.ts';

/**
 * Image names as the catalog writes them (`mcp/echo`, `127.0.0.1:5000/mcp/echo`, `ghcr.io/acme/tool`),
 * read by the grammar of the distribution project's reference package: a first component with a `.`
 * or a `:`, or `localhost`, names a registry; anything else is a path in the configured registry.
 */

const LABEL = '[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?';
/** `host[:port]`, a host being DNS labels or a bracketed IPv6 address. */
export const DOMAIN = new RegExp(`^(?:${LABEL}(?:\\.${LABEL})*|\\[[0-9a-fA-F:.]+\\])(?::\\d{1,5})?$`);
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
/** Only sha256: what Docker-Content-Digest and every registry in use give, and what the proof carries. */
export const DIGEST = /^sha256:[a-f0-9]{64}$/;
/** The distribution spec's limit on a repository name, its domain included. */
const MAX_NAME = 255;

/** Docker Hub's API lives elsewhere than its name, and its one-component names are under `library/`. */
const DOCKER_HUB = { domain: 'docker.io', origin: 'https://registry-1.docker.io' };
const DOCKER_HUB_ALIASES = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io']);

/** A repository, and the registry whose distribution API serves it. */
export interface Repository {
  /** As the catalog names it, e.g. `mcp/echo`. */
  name: string;
  /** The registry as image references name it: `host[:port]`, `docker.io` for Docker Hub. */
  domain: string;
  /** Origin of the distribution API, e.g. `https://registry-1.docker.io`. */
  origin: string;
  /** The repository's path in that registry, e.g. `mcp/echo`. */
  path: string;
}

export interface RegistryHosts {
  /** URL of the registry for names without a domain; its origin only. */
  registry: string;
  /** Other registries a name may start with. */
  hosts: readonly string[];
  /** Registries reached over plain http (loopback ones always are). */
  insecure: readonly string[];
}

export const isLoopback = (domain: string): boolean => {
  const host = domain.replace(/:\d+$/, '');
  return host === 'localhost' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
};

/** The domain of a registry URL, as image names write it. */
export function domainOf(url: string): string {
  const { host } = new URL(url);
  return DOCKER_HUB_ALIASES.has(host) ? DOCKER_HUB.domain : host;
}

/** Finds the registry of each name, refusing names outside the registries the operator configured. */
export class Registries {
  private readonly home: { domain: string; origin: string };
  private readonly hosts: Set<string>;
  private readonly insecure: Set<string>;

  constructor(config: RegistryHosts) {
    const domain = domainOf(config.registry);
    this.home = {
      domain,
      origin: domain === DOCKER_HUB.domain ? DOCKER_HUB.origin : new URL(config.registry).origin,
    };
    this.hosts = new Set(config.hosts.map(normalDomain));
    this.insecure = new Set(config.insecure.map(normalDomain));
  }

  repository(name: string): Repository {
    const trimmed = name.trim();
    const slash = trimmed.indexOf('/');
    const first = slash < 0 ? '' : trimmed.slice(0, slash);
    const named = first.includes('.') || first.includes(':') || first === 'localhost';
    const path = named ? trimmed.slice(slash + 1) : trimmed;
    if (
      trimmed.length > MAX_NAME ||
      (named && !DOMAIN.test(first)) ||
      !path.split('/').every((component) => PATH_COMPONENT.test(component))
    ) {
      throw invalidRequest(
        `not an image repository name: ${JSON.stringify(name)}`,
        'Use a repository such as mcp/echo, or registry-host:port/repository; the tag goes in the version',
      );
    }
    const registry = named ? this.registryOf(normalDomain(first), name) : this.home;
    const dockerHub = registry.domain === DOCKER_HUB.domain && !path.includes('/');
    return { name: trimmed, ...registry, path: dockerHub ? `library/${path}` : path };
  }

  private registryOf(domain: string, name: string): { domain: string; origin: string } {
    if (domain === this.home.domain) return this.home;
    if (!this.hosts.has(domain)) {
      throw invalidRequest(
        `${name} names the registry ${domain}, which this gateway does not use`,
        `Add ${domain} to the hosts option of registry-oci, or name the repository without a registry to use ${this.home.domain}`,
      );
    }
    if (domain === DOCKER_HUB.domain) return DOCKER_HUB;
    const plain = this.insecure.has(domain) || isLoopback(domain);
    return { domain, origin: `${plain ? 'http' : 'https'}://${domain}` };
  }
}

/** A domain as it is compared: lowercase, Docker Hub by one name. */
export function normalDomain(domain: string): string {
  const lower = domain.toLowerCase();
  return DOCKER_HUB_ALIASES.has(lower) ? DOCKER_HUB.domain : lower;
}

/** What a catalog's version may be: a tag, or a digest when it pins the image itself. */
export function checkReference(name: string, reference: string): void {
  if (!TAG.test(reference) && !DIGEST.test(reference)) {
    throw invalidRequest(
      `${name}: not an image tag or sha256 digest: ${JSON.stringify(reference)}`,
      'Use a tag (letters, digits, _ . -, at most 128) or sha256:<64 hex digits>',
    );
  }
}

/** `domain/path@digest`: how a sandbox names the image, never by a tag. */
export const pinnedImage = (repository: Repository, digest: string): string =>
  `${repository.domain}/${repository.path}@${digest}`;
