/**
 * The `weightcast` command line: one commander program. Each subcommand is declared in
 * src/cli/definitions (name, arguments, options, help) and carried out by its module in
 * src/cli/commands, which the definition imports only when the command runs. `main` returns the exit
 * code; only bin/weightcast.js exits the process.
 */

import { readFileSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { Command, CommanderError } from 'commander';
import { EXIT_USAGE, processIo, type CliIo } from './io.js';
import { definitionsFor, type RegisterCommand } from './definitions/index.js';

export type { CliIo } from './io.js';

/** The program with the given command definitions (definitionsFor picks them for a command line). */
export function buildProgram(
  io: CliIo,
  setExitCode: (code: number) => void,
  definitions: readonly RegisterCommand[],
): Command {
  const program = new Command('weightcast')
    .description('Move large model weights to many hosts, fast, verified, with bounded memory.')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.stdout(s), writeErr: (s) => io.stderr(s) })
    .version(packageVersion())
    .showHelpAfterError('(run with --help for usage)');
  for (const register of definitions) register(program, io, setExitCode);
  return program;
}

/** The version in package.json: three folders up from dist/src/cli, built or installed. */
function packageVersion(): string {
  const text = readFileSync(new URL('../../../package.json', import.meta.url), 'utf8');
  return (JSON.parse(text) as { version: string }).version;
}

export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  let exitCode = 0;
  const program = buildProgram(
    io,
    (code) => {
      exitCode = code;
    },
    await definitionsFor(argv),
  );
  try {
    await program.parseAsync([...argv], { from: 'user' });
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and version are successful exits; everything else commander raises is a usage error.
      return error.exitCode === 0 ? 0 : EXIT_USAGE;
    }
    throw error;
  }
  if (argv.length === 0) {
    program.outputHelp();
    return EXIT_USAGE;
  }
  return exitCode;
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
