/** Every subcommand, in the order `weightcast --help` lists them. */

import type { Command } from 'commander';
import type { CliIo } from '../io.js';

export type RegisterCommand = (program: Command, io: CliIo, setExitCode: (code: number) => void) => void;

export const COMMANDS: RegisterCommand[] = [];
