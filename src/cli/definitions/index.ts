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
 * CPU at start. Anything that names no command (`--help`, `--version`, a mistyped command) loads
 * none: the list below is enough for it.
 */

import type { Command } from 'commander';
import { addOptions, parseCommandLine, type CommandSpec, type ParsedFlags } from '../command-spec.js';
import type { CliIo } from '../io.js';

export type RegisterCommand = (program: Command, io: CliIo, setExitCode: (code: number) => void) => void;

/**
 * A command as `weightcast --help` lists it (its term, `name [options] <args>`, the same string its
 * definition produces: test/cli/help-list.test.ts compares them; its `description`, which the
 * definition takes from here), and where its definition is. The list alone answers `--help`,
 * `--version` and a mistyped command, so those load no definition at all.
 */
interface Definition {
  name: string;
  term: string;
  description: string;
  load: () => Promise<RegisterCommand>;
  /** Its options as data, for the commands a command line may run without commander (command-spec.ts). */
  spec?: () => Promise<CommandSpec>;
}

/** Every command takes options; `args` is its arguments as help shows them ('' for none). */
function command(
  name: string,
  args: string,
  description: string,
  load: Definition['load'],
  spec?: Definition['spec'],
): Definition {
  return {
    name,
    term: `${name} [options]${args === '' ? '' : ` ${args}`}`,
    description,
    load,
    ...(spec === undefined ? {} : { spec }),
  };
}

export const DEFINITIONS: readonly Definition[] = [
  command(
    'synth',
    '',
    'Write a synthetic checkpoint (Hugging Face layout, deterministic from a seed)',
    async () => (await import('./synth.js')).registerSynth,
  ),
  command(
    'inspect',
    '<path>',
    'Show the tensors, dtypes and parameter count of a safetensors file or model directory, and any problems',
    async () => (await import('./inspect.js')).registerInspect,
  ),
  command(
    'manifest',
    '<src>',
    'Hash a model (directory, file or URL) into its manifest; prints the model digest',
    async () => (await import('./manifest.js')).registerManifest,
  ),
  command(
    'verify',
    '<dir>',
    'Check a local copy against a manifest; lists bad files and pieces',
    async () => (await import('./verify.js')).registerVerify,
  ),
  command(
    'plan',
    '<src>',
    "Show each rank's tensors, slices and source byte ranges for a parallel layout (TP/PP/EP)",
    async () => (await import('./plan.js')).registerPlan,
  ),
  command(
    'pull',
    '<src>',
    'Download a model with every piece verified; resumes where it stopped',
    async () => (await import('./pull.js')).registerPull,
    async () => (await import('./pull.js')).PULL_COMMAND,
  ),
  command(
    'load',
    '<src>',
    'Stream a model into memory, tensor by tensor as bytes arrive, and write it out',
    async () => (await import('./load.js')).registerLoad,
  ),
  command(
    'preshard',
    '<src>',
    'Write per-rank sharded_state files (optionally FP8) with a manifest of every slice',
    async () => (await import('./preshard.js')).registerPreshard,
  ),
  command(
    'scheduler',
    '',
    'Run the swarm scheduler: tells every agent which piece to fetch from whom',
    async () => (await import('./scheduler.js')).registerScheduler,
  ),
  command(
    'agent',
    '',
    'Run a swarm agent: a verified piece cache that fetches from peers and serves them',
    async () => (await import('./agent.js')).registerAgent,
    async () => (await import('./agent.js')).AGENT_COMMAND,
  ),
  command(
    'sim',
    '',
    'Simulate a swarm fan-out with the real scheduling core; prints T_last against the fluid bound',
    async () => (await import('./sim.js')).registerSim,
  ),
  command(
    'put',
    '<src>',
    'Load a model into the seed tier, placing its pieces over the seed nodes by policy',
    async () => (await import('./put.js')).registerPut,
  ),
  command(
    'distribute',
    '<model>',
    "Re-lay a model's pieces over the seed tier (dry run unless --apply)",
    async () => (await import('./distribute.js')).registerDistribute,
  ),
  command(
    'serve',
    '<dir>',
    'Serve a directory over HTTP with byte ranges (an origin for tests and demos); prints {"url": ...} once listening',
    async () => (await import('./serve.js')).registerServe,
  ),
];

/** A command's description, kept once, here: its definition and the list of commands both show it. */
export function descriptionOf(name: string): string {
  const definition = DEFINITIONS.find((entry) => entry.name === name);
  if (definition === undefined) throw new Error(`no command named ${name}`);
  return definition.description;
}

/**
 * The definitions `argv` needs: the named command's alone when its first word is a command (or
 * follows `help`); else the list of commands only (help, the version, an unknown command and its
 * suggestions), which `registerSummaries` declares without their options.
 */
export async function definitionsFor(argv: readonly string[]): Promise<RegisterCommand[]> {
  const first = argv[0] === 'help' ? argv[1] : argv[0];
  const named = DEFINITIONS.find(({ name }) => name === first);
  return named === undefined ? [registerSummaries] : [await named.load()];
}

/**
 * Every command by name and description, listed in help as its definition would be. None of them is
 * ever run: a command line that names one loads its definition instead (definitionsFor).
 */
export const registerSummaries: RegisterCommand = (program) => {
  const terms = new Map(DEFINITIONS.map(({ name, term }) => [name, term]));
  const plain = program.createHelp();
  program.configureHelp({
    subcommandTerm: (command) => terms.get(command.name()) ?? plain.subcommandTerm(command),
  });
  for (const { name, description } of DEFINITIONS) {
    program
      .command(name)
      .description(description)
      .action(() => {
        throw new Error(`weightcast ${name} ran without its definition`);
      });
  }
};

/** A command declared as data (command-spec.ts), registered with commander: help, errors, its action. */
export function registerSpec(spec: CommandSpec): RegisterCommand {
  return (program, io, setExitCode) => {
    const command = program.command(spec.name).description(descriptionOf(spec.name));
    for (const arg of spec.args) command.argument(arg.term, arg.description);
    addOptions(command, spec.options).action(async (...params: unknown[]) => {
      const args = params.slice(0, spec.args.length) as string[];
      setExitCode(await spec.run(args, params[spec.args.length] as ParsedFlags, io));
    });
  };
}

/**
 * The command a command line runs without commander, parsed: for a command declared as data whose
 * line `parseCommandLine` reads in full; else undefined (commander reads it).
 */
export async function commandWithoutCommander(
  argv: readonly string[],
): Promise<{ spec: CommandSpec; args: string[]; flags: ParsedFlags } | undefined> {
  const load = DEFINITIONS.find(({ name }) => name === argv[0])?.spec;
  if (load === undefined) return undefined;
  const spec = await load();
  const parsed = parseCommandLine(spec, argv.slice(1));
  return parsed === undefined ? undefined : { spec, ...parsed };
}
