/**
 * What a command may touch of its process: output streams, whether they are terminals, and a signal
 * that aborts on Ctrl-C. Commands get a CliIo instead of `process` so tests can run them in memory.
 */

import { asIoError, errorEntry, isWeightcastError } from '../errors.js';

export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  stdoutIsTTY: boolean;
  stderrIsTTY: boolean;
  signal: AbortSignal;
}

export function processIo(signal: AbortSignal): CliIo {
  return {
    stdout: (text) => void process.stdout.write(text),
    stderr: (text) => void process.stderr.write(text),
    stdoutIsTTY: process.stdout.isTTY === true,
    stderrIsTTY: process.stderr.isTTY === true,
    signal,
  };
}

/** An in-memory CliIo for tests: everything written is kept in `out` and `err`. */
export function memoryIo(signal: AbortSignal = new AbortController().signal): CliIo & {
  out: string[];
  err: string[];
} {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    stdout: (text) => void out.push(text),
    stderr: (text) => void err.push(text),
    stdoutIsTTY: false,
    stderrIsTTY: false,
    signal,
  };
}

/** Exit codes: 0 verified success, 1 failure of the job, 2 bad usage or bad input. */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/**
 * Prints an error the way every command does: one line `weightcast: CODE: message` on stderr, or a JSON
 * object on stdout with `--json`. Returns the exit code to use.
 */
export function reportError(io: CliIo, thrown: unknown, json: boolean): number {
  const error = asIoError(thrown, systemCallLabel(thrown));
  if (isWeightcastError(error)) {
    if (json) io.stdout(JSON.stringify({ event: 'error', error: error.toJSON() }) + '\n');
    else io.stderr(`weightcast: ${error.code}: ${error.message}\n`);
    // The one place that decides: the error catalogue's exit class (2 for bad usage or input).
    return errorEntry(error.code).exit;
  }
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  if (json) io.stdout(JSON.stringify({ event: 'error', error: { code: 'INTERNAL', message } }) + '\n');
  else io.stderr(`weightcast: internal error: ${message}\n`);
  return EXIT_FAILURE;
}

/**
 * What a system error that reached the command unwrapped was doing, from its `syscall`: a host name
 * lookup or a socket is not the file system, and a label that says so points the user the right way.
 */
function systemCallLabel(error: unknown): string {
  const syscall = (error as { syscall?: unknown } | null)?.syscall;
  if (syscall === 'getaddrinfo' || syscall === 'getnameinfo') return 'host name lookup';
  if (syscall === 'listen' || syscall === 'bind' || syscall === 'connect' || syscall === 'accept')
    return 'network';
  if (typeof (error as { path?: unknown } | null)?.path === 'string') return 'file system';
  return typeof syscall === 'string' ? `system call ${syscall}` : 'system';
}

/**
 * For the long-running commands: announces `weightcast <what> listening on <url>` (or a JSON
 * `listening` event) and resolves on Ctrl-C or SIGTERM.
 */
export async function serveUntilInterrupted(
  io: CliIo,
  json: boolean,
  what: string,
  details: { url: string } & Record<string, string>,
): Promise<void> {
  io.stdout(
    json
      ? JSON.stringify({ event: 'listening', ...details }) + '\n'
      : `weightcast ${what} listening on ${details.url}\n`,
  );
  await untilInterrupted(io);
}

/** Resolves on Ctrl-C or SIGTERM (when `io.signal` aborts). */
export async function untilInterrupted(io: CliIo): Promise<void> {
  await new Promise<void>((resolve) => {
    if (io.signal.aborted) resolve();
    io.signal.addEventListener('abort', () => resolve(), { once: true });
  });
}
