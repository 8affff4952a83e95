import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { loadAll } from 'js-yaml';
import type { PluginManifest } from '@sigil/plugin-api';
import { builtinPlugins } from '../../services/builtin-plugins.ts';
import { ENV_OVERRIDES, loadConfig, SECRET_CONFIG_PATHS, type SigilConfig } from '../../services/config.ts';
import { repoPath } from '../support/paths.ts';

/**
 * deploy/kubernetes/: every manifest parses, and what the deployment's safety rests on is there, so
 * an edit cannot silently drop it: hardened pods, secrets only from Secrets, probes on /health, two
 * replicas with a Service and a PodDisruptionBudget each, configs that Sigil and its plugins accept,
 * the balancer's affinity key, and the sandbox plugin's RBAC kept to its namespace.
 */

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  [field: string]: unknown;
}

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string } };
}

interface Container {
  name: string;
  image: string;
  command: string[];
  ports: { name: string; containerPort: number }[];
  env: EnvVar[];
  readinessProbe?: { httpGet?: { path: string; port: string } };
  startupProbe?: { httpGet?: { path: string; port: string } };
  livenessProbe?: { tcpSocket?: { port: string }; httpGet?: unknown };
  resources?: { limits?: { memory?: string } };
  securityContext?: {
    allowPrivilegeEscalation?: boolean;
    readOnlyRootFilesystem?: boolean;
    privileged?: boolean;
    capabilities?: { drop?: string[]; add?: string[] };
  };
  volumeMounts: { name: string; mountPath: string }[];
}

interface PodSpec {
  automountServiceAccountToken?: boolean;
  hostNetwork?: boolean;
  hostPID?: boolean;
  hostIPC?: boolean;
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number; seccompProfile?: { type: string } };
  containers: Container[];
  volumes: { name: string; configMap?: { name: string }; emptyDir?: unknown }[];
}

interface Deployment extends Manifest {
  spec: {
    replicas: number;
    selector: { matchLabels: Record<string, string> };
    template: { metadata: { labels: Record<string, string> }; spec: PodSpec };
  };
}

const DIR = repoPath('deploy', 'kubernetes');

function manifests(): Manifest[] {
  return readdirSync(DIR)
    .filter((file) => file.endsWith('.yaml'))
    .flatMap((file) => loadAll(readFileSync(join(DIR, file), 'utf8')) as Manifest[]);
}

const SERVICES = ['runtime', 'gateway'] as const;

/** Kinds that live in no namespace. */
const CLUSTER_WIDE = ['Namespace', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'];

/** Environment variables whose value is a secret: Sigil's secret settings and the database URL (its password). */
const SECRET_ENV = Object.entries(ENV_OVERRIDES)
  .filter(
    ([name, { path }]) =>
      name === 'DATABASE_URL' || (SECRET_CONFIG_PATHS as readonly string[]).includes(path),
  )
  .map(([name]) => name);

describe('deploy/kubernetes manifests', () => {
  const all = manifests();
  const find = <T extends Manifest>(kind: string, name: string) =>
    all.find((m) => m.kind === kind && m.metadata.name === name) as T | undefined;
  const deployment = (service: string) => find<Deployment>('Deployment', `sigil-${service}`) as Deployment;
  const container = (service: string) => deployment(service).spec.template.spec.containers[0] as Container;

  it('parse, each a named object, namespaced in sigil or sigil-sandboxes unless cluster-wide', () => {
    expect(all.length).to.be.greaterThan(10);
    for (const manifest of all) {
      expect(manifest.apiVersion, JSON.stringify(manifest.metadata)).to.be.a('string');
      expect(manifest.metadata.name).to.be.a('string');
      if (!CLUSTER_WIDE.includes(manifest.kind))
        expect(['sigil', 'sigil-sandboxes'], `${manifest.kind} ${manifest.metadata.name}`).to.include(
          manifest.metadata.namespace,
        );
    }
  });

  it('put both services in a namespace where the cluster enforces the restricted Pod Security profile', () => {
    expect(find('Namespace', 'sigil')?.metadata.labels).to.include({
      'pod-security.kubernetes.io/enforce': 'restricted',
    });
  });

  for (const service of SERVICES) {
    describe(`sigil-${service}`, () => {
      it('runs two replicas of an image pinned by digest, as `sigil <service>`', () => {
        expect(deployment(service).spec.replicas).to.equal(2);
        expect(container(service).image).to.match(/@sha256:[0-9a-f]{64}$/);
        expect(container(service).command.slice(-1)).to.deep.equal([service]);
      });

      it('runs hardened: non-root, seccomp RuntimeDefault, read-only root, no capability, no privilege escalation, no token, nothing of the host', () => {
        const pod = deployment(service).spec.template.spec;
        expect(pod.automountServiceAccountToken).to.equal(false);
        expect(pod.securityContext).to.deep.include({ runAsNonRoot: true });
        expect(pod.securityContext?.runAsUser).to.be.greaterThan(0);
        expect(pod.securityContext?.seccompProfile).to.deep.equal({ type: 'RuntimeDefault' });
        expect([pod.hostNetwork, pod.hostPID, pod.hostIPC]).to.deep.equal([undefined, undefined, undefined]);
        for (const each of pod.containers) {
          expect(each.securityContext).to.deep.include({
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
          });
          expect(each.securityContext?.privileged).to.not.equal(true);
          expect(each.securityContext?.capabilities).to.deep.equal({ drop: ['ALL'] });
          expect(each.resources?.limits?.memory).to.be.a('string');
        }
      });

      it('takes every secret from a Secret, never a value in the manifest', () => {
        const env = container(service).env;
        const secrets = env.filter((variable) => SECRET_ENV.includes(variable.name));
        expect(secrets.map((variable) => variable.name)).to.include.members(
          service === 'gateway'
            ? ['DATABASE_URL', 'SIGIL_DATA_KEY', 'GATEWAY_SECRET_KEY']
            : ['DATABASE_URL', 'SIGIL_DATA_KEY', 'MCP_SIGNING_KEY', 'RUNTIME_DATA_KEY'],
        );
        for (const variable of secrets) {
          expect(variable.value, variable.name).to.equal(undefined);
          expect(variable.valueFrom?.secretKeyRef, variable.name).to.deep.equal({
            ...variable.valueFrom?.secretKeyRef,
            name: `sigil-${service}`,
            key: variable.name,
          });
        }
      });

      it('is ready and starts by /health, and alive by its port (a database outage must not restart it)', () => {
        const { readinessProbe, startupProbe, livenessProbe } = container(service);
        expect(readinessProbe?.httpGet).to.deep.equal({ path: '/health', port: 'http' });
        expect(startupProbe?.httpGet).to.deep.equal({ path: '/health', port: 'http' });
        expect(livenessProbe?.tcpSocket).to.deep.equal({ port: 'http' });
      });

      it('has a Service and a PodDisruptionBudget that select its pods', () => {
        const { selector, template } = deployment(service).spec;
        expect(template.metadata.labels).to.include(selector.matchLabels);
        const svc = find<
          Manifest & { spec: { selector: Record<string, string>; ports: { targetPort: string }[] } }
        >('Service', `sigil-${service}`);
        expect(template.metadata.labels).to.include(svc?.spec.selector);
        expect(svc?.spec.ports.map((port) => port.targetPort)).to.deep.equal(['http']);
        const budget = find<
          Manifest & { spec: { minAvailable: number; selector: { matchLabels: Record<string, string> } } }
        >('PodDisruptionBudget', `sigil-${service}`);
        expect(budget?.spec.minAvailable).to.equal(1);
        expect(template.metadata.labels).to.include(budget?.spec.selector.matchLabels);
      });

      it('reads a config Sigil and every plugin of it accept, listening on all interfaces at the container port', async () => {
        const { config, path } = configOf(service);
        const listen = config[service];
        expect(listen.host).to.equal('0.0.0.0');
        expect(container(service).ports).to.deep.equal([{ name: 'http', containerPort: listen.port }]);
        expect(container(service).env).to.deep.include({ name: 'SIGIL_CONFIG', value: path });
        expect(config.mode).to.equal('production');
        for (const plugin of config.plugins) {
          const load = builtinPlugins[plugin.resolve];
          expect(load, plugin.resolve).to.be.a('function');
          const manifest = ((await load?.()) as { default: PluginManifest }).default;
          manifest.config.parse(plugin.options ?? {});
        }
      });
    });
  }

  /** The service's sigil.config.json from its ConfigMap, loaded as Sigil loads it; and where its pods find it. */
  function configOf(service: string): { config: SigilConfig; path: string } {
    const pod = deployment(service).spec.template.spec;
    const volume = pod.volumes.find((each) => each.configMap);
    const map = find<Manifest & { data: Record<string, string> }>('ConfigMap', volume?.configMap?.name ?? '');
    const mount = container(service).volumeMounts.find((each) => each.name === volume?.name);
    const dir = mkdtempSync(join(tmpdir(), 'sigil-k8s-config-'));
    try {
      const file = join(dir, 'sigil.config.json');
      writeFileSync(file, map?.data['sigil.config.json'] ?? '');
      return {
        config: loadConfig({ path: file, env: {} }).config,
        path: `${mount?.mountPath}/sigil.config.json`,
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it('hashes on deploy/nginx’s affinity key at the Ingress, to each service by the host of its public URL', () => {
    const ingress = find<
      Manifest & {
        spec: {
          rules: {
            host: string;
            http: { paths: { backend: { service: { name: string; port: { name: string } } } }[] };
          }[];
        };
      }
    >('Ingress', 'sigil');
    expect(ingress?.metadata.annotations?.['nginx.ingress.kubernetes.io/upstream-hash-by']).to.equal(
      '$http_x_mcp_session|$http_x_sigil_on_behalf_of|$http_authorization',
    );
    const routes = Object.fromEntries(
      (ingress?.spec.rules ?? []).map((rule) => [rule.host, rule.http.paths[0]?.backend.service]),
    );
    for (const service of SERVICES) {
      const { publicUrl } = configOf(service).config[service];
      expect(routes[new URL(publicUrl ?? '').host]).to.deep.equal({
        name: `sigil-${service}`,
        port: { name: 'http' },
      });
    }
  });

  it('grants the future kubernetes sandbox plugin its pods, their attach, NetworkPolicies and Leases in the sandbox namespace alone, which admits digest-pinned images only', () => {
    const role = find<Manifest & { rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] }>(
      'Role',
      'sigil-sandbox-runtime',
    );
    expect(role?.metadata.namespace).to.equal('sigil-sandboxes');
    const granted = (resource: string) =>
      role?.rules.find((rule) => rule.resources.includes(resource))?.verbs ?? [];
    expect(granted('pods')).to.include.members(['create', 'get', 'list', 'delete']);
    expect(granted('pods/attach')).to.include('create');
    expect(granted('networkpolicies')).to.include.members(['create', 'delete']);
    expect(granted('leases')).to.include.members(['create', 'update', 'delete']);
    for (const never of ['pods/exec', 'pods/log', 'secrets', 'configmaps', 'pods/ephemeralcontainers'])
      expect(granted(never), never).to.deep.equal([]);
    expect(all.filter((m) => m.kind === 'ClusterRole' || m.kind === 'ClusterRoleBinding')).to.deep.equal([]);
    const roleBinding = find<Manifest & { subjects: { kind: string; name: string; namespace: string }[] }>(
      'RoleBinding',
      'sigil-sandbox-runtime',
    );
    expect(roleBinding?.subjects).to.deep.equal([
      { kind: 'ServiceAccount', name: 'sigil-gateway', namespace: 'sigil' },
    ]);
    expect(find('Namespace', 'sigil-sandboxes')?.metadata.labels).to.include({
      'pod-security.kubernetes.io/enforce': 'restricted',
    });
    const digests = find<Manifest & { spec: { validations: { expression: string }[] } }>(
      'ValidatingAdmissionPolicy',
      'sigil-sandbox-images-by-digest',
    );
    expect(digests?.spec.validations[0]?.expression).to.include("c.image.contains('@sha256:')");
    const binding = find<
      Manifest & { spec: { policyName: string; validationActions: string[]; matchResources: unknown } }
    >('ValidatingAdmissionPolicyBinding', 'sigil-sandbox-images-by-digest');
    expect(binding?.spec).to.deep.include({
      policyName: digests?.metadata.name,
      validationActions: ['Deny'],
    });
    expect(binding?.spec.matchResources).to.deep.equal({
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'sigil-sandboxes' } },
    });
    const denyAll = find<Manifest & { spec: Record<string, unknown> }>('NetworkPolicy', 'deny-all');
    expect(denyAll?.spec).to.deep.equal({ podSelector: {}, policyTypes: ['Ingress', 'Egress'] });
  });
});
