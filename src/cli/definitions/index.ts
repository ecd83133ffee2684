/**
 * Every subcommand, in the order `weightcast --help` lists them, and where its definition is.
 *
 * A definition module names its command and declares its arguments, options and help; its action
 * imports the module under ../commands that does the work only when the command runs. So
 * `weightcast --help`, and a command that fails on its flags, load commander and these modules and
 * nothing of the swarm, loader, seed tier, zod or undici (test/cli/lazy-load.test.ts checks it).
 * A definition may read a default from a module that holds only constants (src/pull/defaults.ts,
 * src/swarm/scheduler/defaults.ts, ...), never from the implementation.
 *
 * A command line that names a command loads that command's definition alone: every process of a
 * swarm is a `weightcast` command, and loading the other thirteen definitions cost each ~20 ms of
 * CPU at start (`weightcast --help`, and anything that names no command, loads them all).
 */

import type { Command } from 'commander';
import type { CliIo } from '../io.js';

export type RegisterCommand = (program: Command, io: CliIo, setExitCode: (code: number) => void) => void;

const DEFINITIONS: ReadonlyArray<readonly [name: string, load: () => Promise<RegisterCommand>]> = [
  ['synth', async () => (await import('./synth.js')).registerSynth],
  ['inspect', async () => (await import('./inspect.js')).registerInspect],
  ['manifest', async () => (await import('./manifest.js')).registerManifest],
  ['verify', async () => (await import('./verify.js')).registerVerify],
  ['plan', async () => (await import('./plan.js')).registerPlan],
  ['pull', async () => (await import('./pull.js')).registerPull],
  ['load', async () => (await import('./load.js')).registerLoad],
  ['preshard', async () => (await import('./preshard.js')).registerPreshard],
  ['scheduler', async () => (await import('./scheduler.js')).registerScheduler],
  ['agent', async () => (await import('./agent.js')).registerAgent],
  ['sim', async () => (await import('./sim.js')).registerSim],
  ['put', async () => (await import('./put.js')).registerPut],
  ['distribute', async () => (await import('./distribute.js')).registerDistribute],
  ['serve', async () => (await import('./serve.js')).registerServe],
];

/**
 * The definitions `argv` needs: the named command's alone when its first word is a command, else all
 * of them (help, the version, an unknown command and its suggestions).
 */
export async function definitionsFor(argv: readonly string[]): Promise<RegisterCommand[]> {
  const named = DEFINITIONS.find(([name]) => name === argv[0]);
  return Promise.all((named === undefined ? DEFINITIONS : [named]).map(([, load]) => load()));
}
