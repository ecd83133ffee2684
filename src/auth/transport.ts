/**
 * How weightcast's services and their clients meet on the network: the credential a client sends,
 * the TLS it trusts and presents, the HTTP or HTTPS server a service listens with, and the rule
 * that a service reachable from other machines does not run without a cluster credential.
 *
 * One `ServiceAccess` travels with every client of a weightcast service (callJson, the sync channel,
 * the seed tier's calls, HttpOrigin reading peers and seed nodes): its token goes out as
 * `Authorization: Bearer`, its TLS settings (CA, client certificate) go to whichever HTTPS client
 * carries the request. Kept light (no undici, no zod): a pull through the local agent loads it.
 */

import {
  createServer as createHttpServer,
  type RequestListener,
  type Server,
  type ServerOptions,
} from 'node:http';
import { readFileSync } from 'node:fs';
import { Agent as HttpsAgent, createServer as createHttpsServer } from 'node:https';
import { isIP } from 'node:net';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import { WeightcastError } from '../errors.js';
import type { ServiceCredentials } from './gate.js';

/** What a client trusts and presents over TLS (PEM text). */
export interface ClientTls {
  /** CA certificates that sign the services' certificates (default: the system's). */
  ca?: string;
  /** A client certificate and its key, for services that verify their callers. */
  cert?: string;
  key?: string;
}

/** How a client reaches weightcast services. */
export interface ServiceAccess {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string | undefined;
  tls?: ClientTls | undefined;
}

/** A service's TLS (PEM text): its certificate, and optionally the CA its callers' certificates need. */
export interface ServerTls {
  cert: string;
  key: string;
  /** With `verifyClients`: only callers presenting a certificate this CA signed may connect. */
  ca?: string;
  verifyClients?: boolean;
}

/** The headers a request to a weightcast service carries for `access`. */
export function authHeaders(access: ServiceAccess | undefined): Record<string, string> {
  const token = access?.token;
  return token === undefined || token === '' ? {} : { authorization: `Bearer ${token}` };
}

/** What a client connection is given: `ClientTls`, or one secure context that holds it all. */
export interface ClientTlsOptions extends ClientTls {
  secureContext?: SecureContext;
}

/**
 * Where bin/weightcast moves NODE_EXTRA_CA_CERTS (a file of PEM certificates) so that Node does not
 * build its root store at every process start; read here, at the first TLS connection instead.
 */
export const EXTRA_CA_VARIABLE = 'WEIGHTCAST_EXTRA_CA_CERTS';

interface DefaultTrust {
  /** Node's bundled roots and the file's certificates: what Node trusts with NODE_EXTRA_CA_CERTS. */
  ca: string[];
  /** A context with just those, built once: a `ca` option would parse them at every connection. */
  context: SecureContext;
}

let defaultTrust: DefaultTrust | null | undefined;

/**
 * The trust Node would have had by default, had the launcher left it NODE_EXTRA_CA_CERTS; null when
 * that variable was not moved (Node's own default then applies). A file that cannot be read is warned
 * about once and ignored, as Node does at start.
 */
function launcherTrust(): DefaultTrust | null {
  if (defaultTrust !== undefined) return defaultTrust;
  defaultTrust = null;
  const file = process.env[EXTRA_CA_VARIABLE];
  if (file === undefined || file === '') return defaultTrust;
  let pem: string;
  try {
    pem = readFileSync(file, 'utf8');
  } catch (error) {
    process.emitWarning(`Ignoring extra certs from \`${file}\`, load failed: ${(error as Error).message}`);
    return defaultTrust;
  }
  const ca = [...rootCertificates, pem];
  defaultTrust = { ca, context: createSecureContext({ ca }) };
  return defaultTrust;
}

const clientCertificateContexts = new WeakMap<ClientTls, SecureContext>();

/**
 * TLS options for a client connection (node:tls, node:https and undici's `connect` take these).
 * Every client TLS connection weightcast makes takes its options from here, so that an explicit CA
 * replaces the default one (as in Node) and the default includes the launcher's extra certificates.
 */
export function tlsClientOptions(access: ServiceAccess | undefined): ClientTlsOptions {
  const tls = access?.tls;
  const options: ClientTls = {
    ...(tls?.ca === undefined ? {} : { ca: tls.ca }),
    ...(tls?.cert === undefined ? {} : { cert: tls.cert }),
    ...(tls?.key === undefined ? {} : { key: tls.key }),
  };
  if (tls?.ca !== undefined) return options;
  const trust = launcherTrust();
  if (trust === null) return options;
  if (tls === undefined || (tls.cert === undefined && tls.key === undefined)) {
    return { secureContext: trust.context };
  }
  let context = clientCertificateContexts.get(tls);
  if (context === undefined) {
    context = createSecureContext({ ...options, ca: trust.ca });
    clientCertificateContexts.set(tls, context);
  }
  return { secureContext: context };
}

let defaultHttpsAgent: HttpsAgent | undefined;
const httpsAgents = new WeakMap<ClientTls, HttpsAgent>();

/** A keep-alive node:https agent with `access`'s TLS settings, one per settings object. */
export function httpsAgentOf(access: ServiceAccess | undefined): HttpsAgent {
  const tls = access?.tls;
  if (tls === undefined) {
    defaultHttpsAgent ??= new HttpsAgent({ keepAlive: true, ...tlsClientOptions(undefined) });
    return defaultHttpsAgent;
  }
  let agent = httpsAgents.get(tls);
  if (agent === undefined) {
    agent = new HttpsAgent({ keepAlive: true, ...tlsClientOptions(access) });
    httpsAgents.set(tls, agent);
  }
  return agent;
}

/** Node's codes for a certificate the client could not trust or that names another host. */
const CERTIFICATE_ERRORS = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * TLS_UNTRUSTED when `error` (or its cause) is a certificate check that failed, naming the service
 * and what to configure; else undefined. A wrong CA otherwise surfaced as an unreachable service.
 */
export function untrustedCertificate(error: unknown, url: string): WeightcastError | undefined {
  for (let cause = error, depth = 0; cause !== undefined && cause !== null && depth < 4; depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && CERTIFICATE_ERRORS.has(code)) {
      return new WeightcastError(
        'TLS_UNTRUSTED',
        `the certificate of ${url} is not trusted (${code}: ${(cause as Error).message}); give the CA that signed it with --tls-ca`,
        { url, reason: code },
        { cause: error },
      );
    }
    cause = (cause as { cause?: unknown }).cause;
  }
  return undefined;
}

/** An HTTP server, or an HTTPS one when `tls` is given; both emit 'request' and 'upgrade' alike. */
export function createServiceServer(
  tls: ServerTls | undefined,
  options: ServerOptions,
  listener: RequestListener,
): Server {
  if (tls === undefined) return createHttpServer(options, listener);
  const server = createHttpsServer(
    {
      ...options,
      cert: tls.cert,
      key: tls.key,
      ...(tls.ca === undefined ? {} : { ca: tls.ca }),
      ...(tls.verifyClients === true ? { requestCert: true, rejectUnauthorized: true } : {}),
    },
    listener,
  );
  // An https.Server is an http.Server over TLS sockets (the same request, upgrade and timeout API).
  return server;
}

export function schemeOf(tls: ServerTls | undefined): 'http' | 'https' {
  return tls === undefined ? 'http' : 'https';
}

/** Whether `host` (an address or name to listen on) keeps a service to this machine. */
export function isLoopbackHost(host: string): boolean {
  const name = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  if (name === 'localhost') return true;
  if (isIP(name) === 4) return name.startsWith('127.');
  return name === '::1' || name.startsWith('::ffff:127.');
}

/**
 * Secure by default: a service listening where other machines reach it needs a cluster credential,
 * unless its operator said `--insecure`. Loopback needs nothing, so demos and tests run as they are.
 */
export function assertListenAllowed(
  host: string,
  credentials: ServiceCredentials,
  insecure: boolean,
  what: string,
): void {
  if (insecure || isLoopbackHost(host)) return;
  if (credentials.clusterToken !== undefined || credentials.operatorToken !== undefined) return;
  throw new WeightcastError(
    'USAGE',
    `${what} refuses to listen on ${host} without a cluster credential: anyone who reaches it could use it. ` +
      'Set WEIGHTCAST_CLUSTER_TOKEN or pass --cluster-token-file FILE (or --insecure to run it open)',
  );
}
