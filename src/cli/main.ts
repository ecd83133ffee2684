/**
 * The `weightcast` command line. Each subcommand is declared in src/cli/definitions (name, arguments,
 * options, help) and carried out by its module in src/cli/commands, which the definition imports
 * only when the command runs. A command line of `agent` or `pull` that reads cleanly runs without
 * commander (command-spec.ts: 7-18 ms of CPU less per process); everything else, help and usage errors
 * included, goes through the commander program (program.ts). `main` returns the exit code; only
 * bin/weightcast.cjs exits the process.
 */

import { constants as osConstants } from 'node:os';
import { processIo, type CliIo } from './io.js';
import { commandWithoutCommander } from './definitions/index.js';

export type { CliIo } from './io.js';

export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const direct = await commandWithoutCommander(argv);
  if (direct !== undefined) return direct.spec.run(direct.args, direct.flags, io);
  const { runWithCommander } = await import('./program.js');
  return runWithCommander(argv, io);
}

/** How long a command may take to wind down after SIGINT or SIGTERM before the CLI exits anyway. */
export const STOP_GRACE_MS = 10_000;

/**
 * Runs the CLI with Ctrl-C and SIGTERM aborting the command. A command the signal interrupted exits
 * 128 + the signal's number (130, 143), as shells expect, unless it still finished cleanly (a service
 * stopping on SIGTERM: 0). One that has not wound down STOP_GRACE_MS after the signal (an operation
 * that does not heed aborts, e.g. Node's recursive mkdir looping under /proc) is left behind: the
 * CLI says so and returns, and the caller's process.exit ends it.
 */
export async function main(argv: readonly string[]): Promise<number> {
  const controller = new AbortController();
  let signalled: NodeJS.Signals | undefined;
  let timer: NodeJS.Timeout | undefined;
  let giveUp: () => void = () => undefined;
  const stuck = new Promise<'stuck'>((resolve) => (giveUp = () => resolve('stuck')));
  const onSignal = (signal: NodeJS.Signals): void => {
    signalled = signal;
    controller.abort(new Error('interrupted'));
    timer = setTimeout(giveUp, STOP_GRACE_MS);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const code = await Promise.race([runCli(argv, processIo(controller.signal)), stuck]);
    if (signalled === undefined) return code as number;
    const interrupted = 128 + (osConstants.signals[signalled] ?? 0);
    if (code === 'stuck') {
      process.stderr.write(
        `weightcast: still winding down ${STOP_GRACE_MS / 1000} s after ${signalled}; exiting without waiting\n`,
      );
      return interrupted;
    }
    return code === 0 ? 0 : interrupted;
  } finally {
    clearTimeout(timer);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
