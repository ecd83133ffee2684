/** Options that several commands declare alike. */

import type { Command } from 'commander';

/** The `--token` option every origin-reading command takes. */
export function withTokenOption(command: Command): Command {
  return command.option(
    '--token <token>',
    'bearer token for HTTP origins (default: $WEIGHTCAST_TOKEN or $HF_TOKEN)',
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
