/** Options that several commands declare alike. */

import type { Command } from 'commander';
import { addOptions, type OptionSpec } from '../command-spec.js';
import { BODY_BUFFER_BYTES_DEFAULT, SERVER_LIMIT_DEFAULTS } from '../../util/server-limit-defaults.js';

const MIB = 1024 * 1024;

/** The `--token` option every origin-reading command takes. */
export const TOKEN_OPTIONS: readonly OptionSpec[] = [
  {
    flags: '--token <token>',
    description: 'bearer token for HTTP origins (default: $WEIGHTCAST_TOKEN or $HF_TOKEN)',
  },
];

export function withTokenOption(command: Command): Command {
  return addOptions(command, TOKEN_OPTIONS);
}

/** The limits of a command that runs a server (parsed by ../server-limit-flags.ts). */
export function serverLimitOptions(requestTimeoutSDefault: number): OptionSpec[] {
  return [
    {
      flags: '--body-buffer-mb <n>',
      description: `request bodies this process holds in memory at once; more are told 503 SERVER_BUSY (default ${BODY_BUFFER_BYTES_DEFAULT / MIB})`,
    },
    {
      flags: '--connections-per-address <n>',
      description: `connections one client address may hold open; more are told 503 SERVER_BUSY (default ${SERVER_LIMIT_DEFAULTS.connectionsPerAddressMax})`,
    },
    {
      flags: '--request-timeout-s <s>',
      description: `a request's head and body must arrive within this, else 408 (default ${requestTimeoutSDefault})`,
    },
    {
      flags: '--idle-timeout-s <s>',
      description: `close a connection on which nothing moves for this long (default ${SERVER_LIMIT_DEFAULTS.socketIdleMs / 1000})`,
    },
  ];
}

export function withServerLimitOptions(command: Command, requestTimeoutSDefault: number): Command {
  return addOptions(command, serverLimitOptions(requestTimeoutSDefault));
}

/**
 * `--origin-retry-s`: how long one origin read waits out an outage (retries with backoff). An origin
 * that has never answered and cannot be reached gets about 3 s (FIRST_CONTACT_BUDGET_MS), not this.
 */
export const ORIGIN_RETRY_OPTIONS: readonly OptionSpec[] = [
  {
    flags: '--origin-retry-s <s>',
    description:
      'wait out an origin outage this long per read, retrying with backoff, before failing (default 60; ' +
      'an origin that has not answered yet and refuses or has no such host: about 3 s)',
  },
];

export function withOriginRetryOption(command: Command): Command {
  return addOptions(command, ORIGIN_RETRY_OPTIONS);
}

/**
 * The credential and TLS options of every command that runs a weightcast service or talks to one
 * (resolved by src/auth/credentials.ts). `service`: it listens (HTTPS with --tls-cert, the listen
 * guard's --insecure, callers' certificates); `operator`: it does an operator's work (put,
 * distribute) and sends the operator token.
 */
export function accessOptions(kind: 'service' | 'client' | 'operator'): OptionSpec[] {
  const options: OptionSpec[] = [
    {
      flags: '--cluster-token-file <file>',
      description:
        'the cluster credential, a file only its owner can read (default: $WEIGHTCAST_CLUSTER_TOKEN)',
    },
    {
      flags: '--operator-token-file <file>',
      description:
        kind === 'service'
          ? 'the operator credential this service accepts for catalog and seed changes (default: $WEIGHTCAST_OPERATOR_TOKEN)'
          : kind === 'operator'
            ? 'the operator credential this command sends (default: $WEIGHTCAST_OPERATOR_TOKEN)'
            : 'an operator credential, sent when no cluster credential is given (default: $WEIGHTCAST_OPERATOR_TOKEN)',
    },
    {
      flags: '--tls-cert <file>',
      description:
        kind === 'service'
          ? 'serve HTTPS with this certificate (PEM); also presented when this service calls others'
          : 'a client certificate (PEM) to present to services that ask for one',
    },
    { flags: '--tls-key <file>', description: 'the private key (PEM) of --tls-cert' },
    {
      flags: '--tls-ca <file>',
      description: "trust services whose certificates this CA (PEM) signed, not the system's CAs",
    },
  ];
  if (kind === 'service') {
    options.push(
      {
        flags: '--tls-verify-clients',
        description: 'with --tls-ca: accept only callers presenting a certificate it signed',
      },
      {
        flags: '--insecure',
        description: 'listen on a non-loopback address without a cluster credential (anyone may use it)',
      },
    );
  }
  return options;
}

export function withAccessOptions(command: Command, kind: 'service' | 'client' | 'operator'): Command {
  return addOptions(command, accessOptions(kind));
}
