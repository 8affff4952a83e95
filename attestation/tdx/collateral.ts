import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Clock, type Fetch, SigilError } from '@sigil/plugin-api';
import { parseRevocationList } from './der.ts';
import type { TdxQuote } from './quote.ts';
import { platformOf } from './tcb.ts';

/**
 * Where a quote's collateral comes from at attest time, so that evidence carries all a verifier
 * needs offline: a directory of Intel PCS responses, or a PCCS (or Intel's PCS) asked then.
 * Collateral names and encodings are verify.ts's: PCS JSON bodies as served, issuer chains as PEM,
 * CRLs as base64 DER.
 */

export type Collateral = Record<string, string>;

export interface CollateralSource {
  collateralFor(quote: TdxQuote): Promise<Collateral>;
}

/** The files of a collateral directory, by collateral name. */
export const COLLATERAL_FILES = {
  tcbInfo: 'tcbInfo.json',
  tcbInfoIssuerChain: 'tcbInfoIssuerChain.pem',
  qeIdentity: 'qeIdentity.json',
  qeIdentityIssuerChain: 'qeIdentityIssuerChain.pem',
  pckCrl: 'pckCrl.der',
  rootCaCrl: 'rootCaCrl.der',
} as const;

const unavailable = (message: string, cause?: unknown): SigilError =>
  new SigilError('unavailable', message, { details: { reason: 'collateral_unavailable' }, cause });

/** A CRL as served (DER, PEM or hex, as PCS and PCCS variously serve it) as base64 DER. */
export function crlAsBase64Der(body: Uint8Array, what: string): string {
  const text = Buffer.from(body).toString('latin1').trim();
  const pem = /-----BEGIN X509 CRL-----([\s\S]+?)-----END X509 CRL-----/.exec(text);
  const candidates = [
    Buffer.from(body),
    ...(pem?.[1] === undefined ? [] : [Buffer.from(pem[1].replace(/\s/g, ''), 'base64')]),
    ...(/^[0-9a-fA-F]+$/.test(text) ? [Buffer.from(text, 'hex')] : []),
  ];
  for (const der of candidates) {
    try {
      parseRevocationList(der);
      return der.toString('base64');
    } catch {
      // Not this encoding; try the next.
    }
  }
  throw unavailable(`the ${what} is no CRL (neither DER, PEM nor hex)`);
}

export function directorySource(dir: string): CollateralSource {
  const read = async (name: keyof typeof COLLATERAL_FILES): Promise<Buffer> => {
    const path = join(dir, COLLATERAL_FILES[name]);
    try {
      return await readFile(path);
    } catch (error) {
      throw unavailable(`tee-tdx collateral: cannot read ${path} (${(error as Error).message})`, error);
    }
  };
  return {
    async collateralFor() {
      const text = async (name: keyof typeof COLLATERAL_FILES) => (await read(name)).toString('utf8');
      return {
        tcbInfo: await text('tcbInfo'),
        tcbInfoIssuerChain: await text('tcbInfoIssuerChain'),
        qeIdentity: await text('qeIdentity'),
        qeIdentityIssuerChain: await text('qeIdentityIssuerChain'),
        pckCrl: crlAsBase64Der(await read('pckCrl'), COLLATERAL_FILES.pckCrl),
        rootCaCrl: crlAsBase64Der(await read('rootCaCrl'), COLLATERAL_FILES.rootCaCrl),
      };
    },
  };
}

export interface PccsOptions {
  /** The PCCS or PCS base URL, e.g. `https://api.trustedservices.intel.com`. */
  url: string;
  /** Where the root CA CRL is served (Intel's distribution point unless a PCCS serves it). */
  rootCaCrlUrl: string;
  fetch: Fetch;
  clock: Clock;
}

/** Which PCK CA issued the quote's PCK certificate: the PCK CRL to ask for. */
function pckCaOf(leaf: X509Certificate): 'platform' | 'processor' {
  return /PCK Processor CA/.test(leaf.issuer) ? 'processor' : 'platform';
}

/**
 * Intel's PCS v4 API (which a PCCS serves too): TDX TCB info per FMSPC, the TD QE identity, the PCK
 * CRL per CA, and the root CA CRL. Each answer is kept until the earliest `nextUpdate` among them.
 */
export function pccsSource(options: PccsOptions): CollateralSource {
  const base = options.url.replace(/\/+$/, '').replace(/\/(sgx|tdx)\/certification\/v4$/, '');
  const cache = new Map<string, { collateral: Collateral; until: Date }>();

  async function get(url: string, issuerChainHeaders: readonly string[] = []) {
    let response: Response;
    try {
      response = await options.fetch(url);
    } catch (error) {
      throw unavailable(`tee-tdx collateral: ${url} cannot be reached (${(error as Error).message})`, error);
    }
    if (!response.ok) throw unavailable(`tee-tdx collateral: ${url} answered ${response.status}`);
    const header = issuerChainHeaders
      .map((name) => response.headers.get(name))
      .find((value) => value !== null);
    if (issuerChainHeaders.length > 0 && header == null)
      throw unavailable(`tee-tdx collateral: ${url} sent no ${issuerChainHeaders.join(' or ')} header`);
    return {
      body: new Uint8Array(await response.arrayBuffer()),
      issuerChain: decodeURIComponent(header ?? ''),
    };
  }

  async function fetchCollateral(
    fmspc: string,
    ca: string,
  ): Promise<{ collateral: Collateral; until: Date }> {
    const [tcb, qe, pckCrl, rootCaCrl] = await Promise.all([
      get(`${base}/tdx/certification/v4/tcb?fmspc=${fmspc}`, [
        'TCB-Info-Issuer-Chain',
        'SGX-TCB-Info-Issuer-Chain',
      ]),
      get(`${base}/tdx/certification/v4/qe/identity`, ['SGX-Enclave-Identity-Issuer-Chain']),
      get(`${base}/sgx/certification/v4/pckcrl?ca=${ca}&encoding=der`),
      get(options.rootCaCrlUrl),
    ]);
    const collateral = {
      tcbInfo: Buffer.from(tcb.body).toString('utf8'),
      tcbInfoIssuerChain: tcb.issuerChain,
      qeIdentity: Buffer.from(qe.body).toString('utf8'),
      qeIdentityIssuerChain: qe.issuerChain,
      pckCrl: crlAsBase64Der(pckCrl.body, 'PCK CRL'),
      rootCaCrl: crlAsBase64Der(rootCaCrl.body, 'root CA CRL'),
    };
    return { collateral, until: earliestNextUpdate(collateral) };
  }

  return {
    async collateralFor(quote) {
      const leafPem = quote.pckChain[0];
      if (leafPem === undefined)
        throw unavailable(
          `tee-tdx collateral: the quote carries no PCK certificate chain (certification data type ${quote.certificationDataType}), so its FMSPC is unknown`,
        );
      const leaf = new X509Certificate(leafPem);
      const key = `${platformOf(leaf).fmspc}/${pckCaOf(leaf)}`;
      const cached = cache.get(key);
      if (cached !== undefined && options.clock.now() < cached.until) return cached.collateral;
      const [fmspc, ca] = key.split('/') as [string, string];
      const fresh = await fetchCollateral(fmspc, ca);
      cache.set(key, fresh);
      return fresh.collateral;
    },
  };
}

/** When the first piece of collateral is due for renewal; the epoch (keep nothing) when unreadable. */
function earliestNextUpdate(collateral: Collateral): Date {
  try {
    return new Date(Math.min(...nextUpdates(collateral).map((date) => date.getTime())));
  } catch {
    return new Date(0);
  }
}

function nextUpdates(collateral: Collateral): Date[] {
  const dates = [
    (JSON.parse(collateral.tcbInfo as string) as { tcbInfo?: { nextUpdate?: string } }).tcbInfo?.nextUpdate,
    (JSON.parse(collateral.qeIdentity as string) as { enclaveIdentity?: { nextUpdate?: string } })
      .enclaveIdentity?.nextUpdate,
  ].map((date) => new Date(date ?? 0));
  for (const crl of [collateral.pckCrl, collateral.rootCaCrl]) {
    const next = parseRevocationList(Buffer.from(crl as string, 'base64')).nextUpdate;
    if (next !== undefined) dates.push(next);
  }
  return dates;
}
