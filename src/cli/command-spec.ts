/**
 * A command's options as data, read two ways: declared to commander (help, every usage error) and,
 * for the commands every host of a fan-out starts (`agent`, `pull`), parsed without it.
 *
 * Why: commander cost each of these processes 7-18 ms of CPU to import and to build the program,
 * against the 27 ms Node itself takes to start here, and a fan-out starts two `weightcast` processes per
 * host at once on few cores. A command line that `parseCommandLine` reads in full runs without
 * commander; anything it does not (help, a mistake, an option it does not handle) goes to commander as
 * before, so the messages users see stay commander's. Both readings give the same arguments and
 * flags: test/cli/command-spec.test.ts holds them side by side.
 *
 * No value is imported from commander here, only its types, so the fast path never loads it.
 */

import type { Command } from 'commander';
import type { CliIo } from './io.js';

/** One option: `flags` as commander writes them (`--to <dir>`, `--json`, `--no-direct-io`). */
export interface OptionSpec {
  flags: string;
  description: string;
  /** The value when the option is not given (a string for options that take one). */
  default?: string | readonly string[];
  /** Must be given (commander's requiredOption). */
  required?: boolean;
  /** May be given many times; the values are collected in order (the default is then []). */
  repeat?: boolean;
  /** The only values allowed. */
  choices?: readonly string[];
  /** Left out of help (fault injection for tests). */
  hidden?: boolean;
}

/** Flags as commander gives them to an action: camelCased long names. */
export type ParsedFlags = Record<string, string | boolean | string[]>;

export interface CommandSpec {
  name: string;
  /** Required positional arguments, in order: `<src>` and its help. */
  args: readonly { term: string; description: string }[];
  options: readonly OptionSpec[];
  /** Runs the command; returns its exit code. */
  run(args: readonly string[], flags: ParsedFlags, io: CliIo): Promise<number>;
}

/** Declares `options` on a commander command, in order, as `.option()` would. */
export function addOptions<C extends Command>(command: C, options: readonly OptionSpec[]): C {
  for (const spec of options) {
    const option = command.createOption(spec.flags, spec.description);
    if (spec.repeat === true) {
      option.argParser((value: string, previous: string[]) => [...previous, value]);
      option.default(repeatDefault(spec));
    } else if (spec.default !== undefined) option.default(spec.default);
    if (spec.required === true) option.makeOptionMandatory();
    if (spec.choices !== undefined) option.choices(spec.choices);
    if (spec.hidden === true) option.hideHelp();
    command.addOption(option);
  }
  return command;
}

/** A repeatable option's values when it is not given: a fresh copy of its default, else []. */
function repeatDefault(spec: OptionSpec): string[] {
  return Array.isArray(spec.default) ? [...(spec.default as readonly string[])] : [];
}

interface ReadOption {
  spec: OptionSpec;
  /** As typed on a command line: `--memory-mb`. */
  name: string;
  /** Its key in the flags (`memory-mb` -> memoryMb, `--no-agent` -> agent). */
  key: string;
  takesValue: boolean;
  negate: boolean;
}

/** `--memory-mb <mb>`: its name, key (memoryMb) and whether it takes a value; undefined for a form not handled. */
function readOption(spec: OptionSpec): ReadOption | undefined {
  const match = /^--([a-z][a-z0-9-]*)(?: <[a-z0-9:_./-]+>)?$/i.exec(spec.flags);
  if (match === null) return undefined;
  const long = match[1] ?? '';
  const negate = long.startsWith('no-');
  const key = (negate ? long.slice(3) : long).replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
  return { spec, name: `--${long}`, key, takesValue: spec.flags.includes(' <'), negate };
}

/**
 * The arguments and flags of `argv` (the words after the command's name), as commander would give
 * them to the action; undefined for anything else: help or the version asked for, an unknown or
 * malformed option, a missing value, value or argument count, a value that begins with `-` (which
 * commander reads its own way), `--`, short flags. Commander then reads the line and says what is
 * wrong. Pure.
 */
export function parseCommandLine(
  spec: CommandSpec,
  argv: readonly string[],
): { args: string[]; flags: ParsedFlags } | undefined {
  const byLong = new Map<string, ReadOption>();
  for (const option of spec.options) {
    const read = readOption(option);
    if (read === undefined) return undefined;
    byLong.set(read.name, read);
  }
  const flags: ParsedFlags = {};
  const args: string[] = [];
  for (let index = 0; index < argv.length; index++) {
    const word = argv[index] ?? '';
    if (!word.startsWith('-') || word === '-') {
      args.push(word);
      continue;
    }
    if (!word.startsWith('--') || word === '--') return undefined;
    const equals = word.indexOf('=');
    const name = equals < 0 ? word : word.slice(0, equals);
    const option = byLong.get(name);
    if (option === undefined) return undefined;
    if (!option.takesValue) {
      if (equals >= 0) return undefined;
      flags[option.key] = !option.negate;
      continue;
    }
    const value = equals >= 0 ? word.slice(equals + 1) : argv[++index];
    if (value === undefined || value.startsWith('-')) return undefined;
    if (option.spec.choices !== undefined && !option.spec.choices.includes(value)) return undefined;
    if (option.spec.repeat === true) {
      const previous = flags[option.key];
      flags[option.key] = [...(Array.isArray(previous) ? previous : []), value];
    } else flags[option.key] = value;
  }
  if (args.length !== spec.args.length) return undefined;
  const keys = new Set([...byLong.values()].filter((option) => !option.negate).map((option) => option.key));
  for (const option of byLong.values()) {
    if (option.key in flags) continue;
    if (option.spec.required === true) return undefined;
    if (option.spec.repeat === true) flags[option.key] = repeatDefault(option.spec);
    else if (typeof option.spec.default === 'string') flags[option.key] = option.spec.default;
    // A `--no-x` without a `--x` beside it means x is on unless turned off (commander's rule).
    else if (option.negate && !keys.has(option.key)) flags[option.key] = true;
  }
  return { args, flags };
}
