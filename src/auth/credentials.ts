/**
 * Where a command's credentials and TLS files come from: the one place that reads
 * `--cluster-token-file` / `WEIGHTCAST_CLUSTER_TOKEN`, `--operator-token-file` /
 * `WEIGHTCAST_OPERATOR_TOKEN` and `--tls-cert`, `--tls-key`, `--tls-ca`, so every command that talks
 * to a service or runs one resolves them alike. A flag wins over the environment. A token file
 * another user can read is refused: the token is the whole of the cluster's authentication.
 */

import { readFile, stat } from 'node:fs/promises';
import { WeightcastError } from '../errors.js';
import { CREDENTIAL_BYTES_MAX, type ServiceCredentials } from './gate.js';
import type { ClientTls, ServerTls, ServiceAccess } from './transport.js';

/** The flags (as commander parses them) that `withAccessOptions` declares. */
export interface AccessFlags {
  clusterTokenFile?: string;
  operatorTokenFile?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  tlsVerifyClients?: boolean;
  insecure?: boolean;
}

export interface ResolvedAccess {
  /** What a service checks callers against. */
  credentials: ServiceCredentials;
  /** What this process sends when it calls a service. */
  client: ServiceAccess;
  /** Present when `--tls-cert` and `--tls-key` are given: a service listens with HTTPS. */
  serverTls?: ServerTls;
  insecure: boolean;
}

export const CLUSTER_TOKEN_ENV = 'WEIGHTCAST_CLUSTER_TOKEN';
export const OPERATOR_TOKEN_ENV = 'WEIGHTCAST_OPERATOR_TOKEN';
/** Shorter secrets are refused: a token is the only thing between a stranger and the cluster. */
export const TOKEN_CHARS_MIN = 16;

/**
 * Resolves a command's credentials. `sendOperator`: the command does an operator's work (put,
 * distribute) and sends the operator token when it has one; any other sends the cluster token first.
 */
export async function resolveAccess(
  flags: AccessFlags,
  options: { sendOperator?: boolean; env?: NodeJS.ProcessEnv } = {},
): Promise<ResolvedAccess> {
  const env = options.env ?? process.env;
  const clusterToken = await tokenFrom(
    flags.clusterTokenFile,
    '--cluster-token-file',
    env[CLUSTER_TOKEN_ENV],
    CLUSTER_TOKEN_ENV,
  );
  const operatorToken = await tokenFrom(
    flags.operatorTokenFile,
    '--operator-token-file',
    env[OPERATOR_TOKEN_ENV],
    OPERATOR_TOKEN_ENV,
  );
  const token =
    options.sendOperator === true ? (operatorToken ?? clusterToken) : (clusterToken ?? operatorToken);
  const [cert, key, ca] = await Promise.all([
    pemFrom(flags.tlsCert, '--tls-cert'),
    pemFrom(flags.tlsKey, '--tls-key'),
    pemFrom(flags.tlsCa, '--tls-ca'),
  ]);
  if ((cert === undefined) !== (key === undefined)) {
    throw new WeightcastError('USAGE', '--tls-cert and --tls-key go together');
  }
  if (flags.tlsVerifyClients === true && (ca === undefined || cert === undefined)) {
    throw new WeightcastError('USAGE', '--tls-verify-clients needs --tls-cert, --tls-key and --tls-ca');
  }
  const tls: ClientTls | undefined =
    cert === undefined && ca === undefined
      ? undefined
      : {
          ...(ca === undefined ? {} : { ca }),
          ...(cert === undefined || key === undefined ? {} : { cert, key }),
        };
  return {
    credentials: {
      ...(clusterToken === undefined ? {} : { clusterToken }),
      ...(operatorToken === undefined ? {} : { operatorToken }),
    },
    client: { ...(token === undefined ? {} : { token }), ...(tls === undefined ? {} : { tls }) },
    ...(cert === undefined || key === undefined
      ? {}
      : {
          serverTls: {
            cert,
            key,
            ...(ca === undefined ? {} : { ca }),
            ...(flags.tlsVerifyClients === true ? { verifyClients: true } : {}),
          },
        }),
    insecure: flags.insecure === true,
  };
}

async function tokenFrom(
  file: string | undefined,
  flag: string,
  envValue: string | undefined,
  envName: string,
): Promise<string | undefined> {
  if (file !== undefined) return checkedToken(await readTokenFile(file, flag), `${flag} ${file}`);
  if (envValue === undefined || envValue === '') return undefined;
  return checkedToken(envValue.trim(), `$${envName}`);
}

async function readTokenFile(file: string, flag: string): Promise<string> {
  let mode: number;
  let text: string;
  try {
    mode = (await stat(file)).mode;
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new WeightcastError('USAGE', `${flag}: cannot read ${file}: ${(error as Error).message}`, {
      file,
    });
  }
  if ((mode & 0o004) !== 0) {
    throw new WeightcastError(
      'USAGE',
      `${flag}: ${file} is readable by every user of this machine; make it private (chmod 600 ${file})`,
      { file },
    );
  }
  return text.trim();
}

function checkedToken(token: string, where: string): string {
  if (
    token.length < TOKEN_CHARS_MIN ||
    token.length > CREDENTIAL_BYTES_MAX ||
    !/^[\x21-\x7e]+$/.test(token)
  ) {
    throw new WeightcastError(
      'USAGE',
      `the token in ${where} must be ${TOKEN_CHARS_MIN} to ${CREDENTIAL_BYTES_MAX} printable characters without spaces (for example: openssl rand -hex 32)`,
    );
  }
  return token;
}

/** A server's own certificate and key from `--tls-cert`/`--tls-key` alone (a server without tokens). */
export async function serverTlsFrom(flags: {
  tlsCert?: string | undefined;
  tlsKey?: string | undefined;
}): Promise<ServerTls | undefined> {
  const [cert, key] = await Promise.all([
    pemFrom(flags.tlsCert, '--tls-cert'),
    pemFrom(flags.tlsKey, '--tls-key'),
  ]);
  if ((cert === undefined) !== (key === undefined)) {
    throw new WeightcastError('USAGE', '--tls-cert and --tls-key go together');
  }
  return cert === undefined || key === undefined ? undefined : { cert, key };
}

async function pemFrom(file: string | undefined, flag: string): Promise<string | undefined> {
  if (file === undefined) return undefined;
  try {
    return await readFile(file, 'utf8');
  } catch (error) {
    throw new WeightcastError('USAGE', `${flag}: cannot read ${file}: ${(error as Error).message}`, { file });
  }
}
