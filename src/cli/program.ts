/**
 * The `weightcast` commander program: help, the version, usage errors, and every command line that
 * main.ts does not run without it. Only the definitions the command line needs are loaded
 * (definitions/index.ts `definitionsFor`).
 */

import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { EXIT_USAGE, type CliIo } from './io.js';
import { definitionsFor, type RegisterCommand } from './definitions/index.js';

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

export async function runWithCommander(argv: readonly string[], io: CliIo): Promise<number> {
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
