/** Options that several commands declare alike. */

import type { Command } from 'commander';

/** The `--token` option every origin-reading command takes. */
export function withTokenOption(command: Command): Command {
  return command.option(
    '--token <token>',
    'bearer token for HTTP origins (default: $WEIGHTCAST_TOKEN or $HF_TOKEN)',
  );
}
