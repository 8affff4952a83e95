import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { SSE_HEARTBEAT_MS } from '../../core/http/sse.ts';
import { configSchema } from '../../services/config.ts';
import { fillNginxTemplate } from '../../bin/nginx-config.ts';
import { repoPath } from '../support/paths.ts';

const template = readFileSync(repoPath('deploy', 'nginx', 'sigil.conf.template'), 'utf8');
const proxySnippet = readFileSync(repoPath('deploy', 'nginx', 'snippets', 'sigil-proxy.conf'), 'utf8');
const readme = readFileSync(repoPath('deploy', 'README.md'), 'utf8');

/** The text of the `{ … }` block opened by the first line matching `opening` (comments dropped). */
function block(config: string, opening: RegExp): string {
  const text = config.replace(/#.*$/gm, '');
  const start = text.search(opening);
  if (start < 0) throw new Error(`no block ${opening}`);
  let depth = 0;
  for (let i = text.indexOf('{', start); i < text.length; i++) {
    if (text[i] === '{') depth++;
    if (text[i] === '}' && --depth === 0) return text.slice(start, i + 1);
  }
  throw new Error(`block ${opening} is not closed`);
}

/** The `server` block of a service (the one that sets $sigil_service to it). */
function serverBlock(config: string, service: string): string {
  const text = config.replace(/#.*$/gm, '');
  const starts = [...text.matchAll(/^server \{/gm)].map((match) => match.index);
  const found = starts
    .map((start) => block(text.slice(start), /^server \{/))
    .find((server) => server.includes(`set $sigil_service ${service};`));
  if (!found) throw new Error(`no server block of the ${service}`);
  return found;
}

/** The value of a directive in `config`, e.g. `keepalive_timeout 4s` → "4s". */
function directive(config: string, name: string): string {
  const match = new RegExp(`^\\s*${name}\\s+([^;]+);`, 'm').exec(config);
  if (!match?.[1]) throw new Error(`no ${name} in:\n${config}`);
  return match[1].trim();
}

/** nginx's time (`4s`, `660s`, `1m`) or size (`1m`, `512k`) in ms or bytes. */
const seconds = (value: string): number => {
  const [, amount, unit] = /^(\d+)(ms|s|m)?$/.exec(value) ?? [];
  return Number(amount) * ({ ms: 0.001, s: 1, m: 60 }[unit ?? 's'] as number);
};
const bytes = (value: string): number => {
  const [, amount, unit] = /^(\d+)([km])?$/i.exec(value) ?? [];
  return Number(amount) * ({ '': 1, k: 1024, m: 1024 * 1024 }[(unit ?? '').toLowerCase()] as number);
};

/**
 * The shipped nginx configuration (deploy/nginx) against the services' defaults: a change on either
 * side that breaks what deploy/README.md promises fails here, before a deployment meets it.
 */
describe('deploy/nginx against the services’ settings', () => {
  const defaults = configSchema.parse({});

  for (const service of ['runtime', 'gateway'] as const) {
    describe(service, () => {
      const upstream = block(template, new RegExp(`^upstream sigil_${service} `, 'm'));
      const server = serverBlock(template, service);

      it('closes idle connections to a replica before the replica does (the keep-alive race: ECONNRESET)', () => {
        expect(seconds(directive(upstream, 'keepalive_timeout')) * 1000).to.be.below(
          defaults[service].http.keepAliveTimeoutMs,
        );
      });

      it('hashes on the affinity key, consistently', () => {
        expect(directive(upstream, 'hash')).to.equal('$sigil_affinity consistent');
      });

      it('refuses the bodies the replica would refuse, and no smaller ones', () => {
        expect(bytes(directive(server, 'client_max_body_size'))).to.equal(defaults[service].bodyLimitBytes);
      });
    });
  }

  it("waits for a stream's next heartbeat, and for a tool call's longest time limit", () => {
    const runtime = serverBlock(template, 'runtime');
    const gateway = serverBlock(template, 'gateway');
    expect(seconds(directive(runtime, 'proxy_read_timeout')) * 1000).to.be.above(2 * SSE_HEARTBEAT_MS);
    expect(seconds(directive(gateway, 'proxy_read_timeout'))).to.be.above(
      defaults.gateway.maxToolCallTimeoutSeconds,
    );
  });

  it('retries only what never reached a replica or is idempotent, and streams unbuffered', () => {
    expect(directive(proxySnippet, 'proxy_next_upstream').split(/\s+/)).to.have.members(['error', 'timeout']);
    expect(directive(proxySnippet, 'proxy_buffering')).to.equal('off');
    expect(directive(proxySnippet, 'proxy_set_header Connection')).to.equal('""');
  });

  it("deploy/README.md's replica configuration is one sigil takes, keeps idle connections longer than nginx and trusts the balancer", () => {
    const example = /```json\n([\s\S]*?)```/.exec(readme)?.[1];
    const config = configSchema.parse(JSON.parse(example as string));
    for (const service of ['runtime', 'gateway'] as const) {
      const upstream = block(template, new RegExp(`^upstream sigil_${service} `, 'm'));
      expect(config[service].http.keepAliveTimeoutMs).to.be.above(
        seconds(directive(upstream, 'keepalive_timeout')) * 1000,
      );
      // The balancer's connections, trusted, are not capped per client; its X-Forwarded-For names the client.
      expect(config[service].http.trustedProxies).to.have.length.above(0);
    }
  });

  it('is filled in with one server line per replica and the listen addresses', () => {
    const filled = fillNginxTemplate(template, {
      runtime: ['10.0.0.1:8080', '10.0.0.2:8080'],
      gateway: ['10.0.0.1:8402'],
      runtimeListen: '80',
      gatewayListen: '127.0.0.1:8402',
    });
    expect(filled).to.not.include('{{');
    expect(directive(block(filled, /^upstream sigil_runtime /m), 'keepalive')).to.equal('32');
    expect(block(filled, /^upstream sigil_runtime /m).match(/^\s*server .*$/gm)).to.deep.equal([
      '    server 10.0.0.1:8080 max_fails=1 fail_timeout=10s;',
      '    server 10.0.0.2:8080 max_fails=1 fail_timeout=10s;',
    ]);
    expect(block(filled, /^upstream sigil_gateway /m).match(/^\s*server .*$/gm)).to.have.length(1);
    expect(filled).to.match(/^ {4}listen 80;$/m);
    expect(filled).to.match(/^ {4}listen 127\.0\.0\.1:8402;$/m);
  });
});
