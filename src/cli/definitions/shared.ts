/** Options that several commands declare alike. */

import type { Command } from 'commander';
import { BODY_BUFFER_BYTES_DEFAULT, SERVER_LIMIT_DEFAULTS } from '../../util/server-limit-defaults.js';

const MIB = 1024 * 1024;

/** The `--token` option every origin-reading command takes. */
export function withTokenOption(command: Command): Command {
  return command.option(
    '--token <token>',
    'bearer token for HTTP origins (default: $WEIGHTCAST_TOKEN or $HF_TOKEN)',
  );
}

/** The limits of a command that runs a server (parsed by ../server-limit-flags.ts). */
export function withServerLimitOptions(command: Command, requestTimeoutSDefault: number): Command {
  return command
    .option(
      '--body-buffer-mb <n>',
      `request bodies this process holds in memory at once; more are told 503 SERVER_BUSY (default ${BODY_BUFFER_BYTES_DEFAULT / MIB})`,
    )
    .option(
      '--connections-per-address <n>',
      `connections one client address may hold open; more are told 503 SERVER_BUSY (default ${SERVER_LIMIT_DEFAULTS.connectionsPerAddressMax})`,
    )
    .option(
      '--request-timeout-s <s>',
      `a request's head and body must arrive within this, else 408 (default ${requestTimeoutSDefault})`,
    )
    .option(
      '--idle-timeout-s <s>',
      `close a connection on which nothing moves for this long (default ${SERVER_LIMIT_DEFAULTS.socketIdleMs / 1000})`,
    );
}

/**
 * `--origin-retry-s`: how long one origin read waits out an outage (retries with backoff). An origin
 * that has never answered and cannot be reached gets about 3 s (FIRST_CONTACT_BUDGET_MS), not this.
 */
export function withOriginRetryOption(command: Command): Command {
  return command.option(
    '--origin-retry-s <s>',
    'wait out an origin outage this long per read, retrying with backoff, before failing (default 60; ' +
      'an origin that has not answered yet and refuses or has no such host: about 3 s)',
  );
}

/**
 * The credential and TLS options of every command that runs a weightcast service or talks to one
 * (resolved by src/auth/credentials.ts). `service`: it listens (HTTPS with --tls-cert, the listen
 * guard's --insecure, callers' certificates); `operator`: it does an operator's work (put,
 * distribute) and sends the operator token.
 */
export function withAccessOptions(command: Command, kind: 'service' | 'client' | 'operator'): Command {
  command
    .option(
      '--cluster-token-file <file>',
      'the cluster credential, a file only its owner can read (default: $WEIGHTCAST_CLUSTER_TOKEN)',
    )
    .option(
      '--operator-token-file <file>',
      kind === 'service'
        ? 'the operator credential this service accepts for catalog and seed changes (default: $WEIGHTCAST_OPERATOR_TOKEN)'
        : kind === 'operator'
          ? 'the operator credential this command sends (default: $WEIGHTCAST_OPERATOR_TOKEN)'
          : 'an operator credential, sent when no cluster credential is given (default: $WEIGHTCAST_OPERATOR_TOKEN)',
    )
    .option(
      '--tls-cert <file>',
      kind === 'service'
        ? 'serve HTTPS with this certificate (PEM); also presented when this service calls others'
        : 'a client certificate (PEM) to present to services that ask for one',
    )
    .option('--tls-key <file>', 'the private key (PEM) of --tls-cert')
    .option(
      '--tls-ca <file>',
      "trust services whose certificates this CA (PEM) signed, not the system's CAs",
    );
  if (kind === 'service') {
    command
      .option('--tls-verify-clients', 'with --tls-ca: accept only callers presenting a certificate it signed')
      .option(
        '--insecure',
        'listen on a non-loopback address without a cluster credential (anyone may use it)',
      );
  }
  return command;
}
