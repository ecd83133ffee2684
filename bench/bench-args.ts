/**
 * How a benchmark command reads its flags, the same way in each: `--help` (or `-h`) prints its usage
 * and runs nothing; a flag it does not know, a flag without its value or a value it refuses ends it
 * with one line naming the problem, then the usage, on stderr and exit code 2, before it has started
 * anything. A mistyped flag must not start a multi-GiB run with the defaults, nor end in a stack
 * trace.
 */

import { rmSync } from 'node:fs';
import { onAbruptEnd } from './netns/children.js';

/** A flag the command refuses (thrown by `read`, or by the helpers below). */
export class BenchUsageError extends Error {
  override name = 'UsageError';
}

/**
 * Runs `read` on the command line (node:util's parseArgs in strict mode, and checks of its own).
 * Returns what it returns, or undefined when the command must stop: usage printed for `--help`, or
 * a usage error reported (exit code 2). Any other error is not about the flags and is thrown on.
 */
export function readBenchArgs<T>(
  command: string,
  usage: string,
  read: (argv: string[]) => T,
  argv: readonly string[] = process.argv.slice(2),
): T | undefined {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${usage}\n`);
    return undefined;
  }
  try {
    return read([...argv]);
  } catch (error) {
    if (!isUsageError(error)) throw error;
    process.stderr.write(`${command}: ${error.message}\n${usage}\n`);
    process.exitCode = 2;
    return undefined;
  }
}

function isUsageError(error: unknown): error is Error {
  if (error instanceof BenchUsageError) return true;
  // parseArgs' own errors: an unknown option, a missing value, a positional where none is taken.
  const code = (error as { code?: unknown } | null)?.code;
  return error instanceof Error && typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_');
}

/** `text` as a number in [min, max] (an integer if `integer`), else a usage error naming `flag`. */
export function flagNumber(
  text: string | undefined,
  flag: string,
  fallback: number,
  limits: { min: number; max: number; integer?: boolean },
): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  const integer = limits.integer === true;
  if (
    text.trim() === '' ||
    !Number.isFinite(value) ||
    (integer && !Number.isInteger(value)) ||
    value < limits.min ||
    value > limits.max
  ) {
    throw new BenchUsageError(
      `${flag} must be ${integer ? 'an integer' : 'a number'} from ${limits.min} to ${limits.max}, not "${text}"`,
    );
  }
  return value;
}

/**
 * Removes `dir` if the process ends before the benchmark removes it itself (Ctrl-C, SIGTERM, an
 * uncaught error): a benchmark's temporary model can be gigabytes. Returns the function that
 * cancels this, for the benchmark's own clean-up (or `--keep`) to call.
 */
export function removedOnAbruptEnd(dir: string): () => void {
  return onAbruptEnd(() => rmSync(dir, { recursive: true, force: true }));
}
