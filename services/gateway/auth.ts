import { HttpRuntimeSource, type RuntimeSource } from '../../core/auth/delegation/source.ts';
import type { EvidenceVerifier } from '../../core/auth/delegation/trust.ts';
import { createWalletAuth, type DelegationOptions, type WalletAuth } from '../../core/auth/index.ts';
import { publicBase, publicBaseUrl } from '../../core/auth/settings.ts';
import type { Kernel } from '../kernel.ts';
import type { SigilConfig } from '../config.ts';

export interface GatewayAuthOptions {
  /**
   * Verifiers of the runtime's TEE evidence, by platform, with which the gateway judges its trust
   * state: by default the TEE backends the kernel loaded (each verifies its own platform's evidence),
   * so a gateway trusts runtimes on its own platform, normally the same hardware.
   */
  evidenceVerifiers?: readonly EvidenceVerifier[];
  /**
   * The runtime this process serves (`sigil up`), which the gateway reads directly unless
   * `gateway.delegation.runtimeUrl` names one to read over HTTP.
   */
  inProcessRuntime?: RuntimeSource;
}

/**
 * The gateway's wallet auth: long-lived wallet tokens, operator wallets that may act for others, the
 * runtime's delegated JWTs when `gateway.delegation.enabled`, and protected-resource metadata for MCP
 * clients.
 */
export function gatewayAuth(kernel: Kernel, options: GatewayAuthOptions = {}): WalletAuth {
  const { config } = kernel;
  return createWalletAuth(
    kernel,
    {
      service: 'gateway',
      section: config.gateway,
      routePrefix: '/api/auth',
      jwtTtlSeconds: config.auth.gatewayJwtTtlSeconds,
      walletTokens: true,
      enforceOperatorSignatures: config.gateway.erc8128EnforceOperatorMcp,
      actingForWallets: true,
      operators: config.gateway.operatorWallets,
    },
    {
      ...(config.gateway.delegation.enabled ? { delegation: delegationOptions(kernel, options) } : {}),
      protectedResource: { authorizationServer: delegationIssuer(config) },
    },
  );
}

/** The runtime, as the issuer of the delegated JWTs the gateway accepts, when its URL is configured. */
function delegationIssuer(config: SigilConfig): string | undefined {
  if (!config.gateway.delegation.enabled) return undefined;
  return config.gateway.delegation.runtimeUrl ?? config.runtime.publicUrl;
}

/** How the gateway verifies the runtime's delegated JWTs (`gateway.delegation`). */
function delegationOptions(kernel: Kernel, options: GatewayAuthOptions): DelegationOptions {
  const { config } = kernel;
  const { delegation } = config.gateway;
  return {
    source: runtimeSource(config, options.inProcessRuntime),
    issuer: publicBase(config.runtime),
    cacheSeconds: delegation.cacheSeconds,
    requireTrusted: delegation.requireTrusted,
    verifiers: options.evidenceVerifiers ?? kernel.plugins.all('tee-backend'),
  };
}

/**
 * The runtime the gateway trusts: at `gateway.delegation.runtimeUrl` when configured; otherwise the
 * runtime this process serves (`sigil up`), read directly; otherwise the runtime's public URL.
 */
function runtimeSource(config: SigilConfig, inProcess: RuntimeSource | undefined): RuntimeSource {
  const configured = config.gateway.delegation.runtimeUrl;
  if (configured !== undefined) return new HttpRuntimeSource(configured);
  return inProcess ?? new HttpRuntimeSource(publicBaseUrl(config.runtime).href);
}
