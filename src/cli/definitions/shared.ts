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

/** `--origin-retry-s`: how long one origin read waits out an outage (retries with backoff). */
export function withOriginRetryOption(command: Command): Command {
  return command.option(
    '--origin-retry-s <s>',
    'wait out an origin outage this long per read, retrying with backoff, before failing (default 60)',
  );
}
