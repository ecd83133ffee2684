/**
 * Child processes a benchmark starts, and only those: a registry that remembers each child by its
 * PID until it exits, so cleanup can signal exactly what this process started and nothing else.
 * Plus the few waits a benchmark needs (a line on stdout, an exit), each bounded in time.
 */

import type { ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** How much of a child's stdout and stderr is kept for error messages. */
const TAIL_BYTES_MAX = 8 * 1024;
/** Bytes of a line `firstLine` accumulates before giving up on it. */
const LINE_BYTES_MAX = 64 * 1024;
/** How long `firstMatch` still reads a child's stdout after the child exited. */
const EXIT_DRAIN_MS = 2000;
/** How often `stopAll` looks whether its children are gone. */
const POLL_MS = 50;

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class ChildRegistry {
  readonly #live = new Set<ChildProcess>();

  /** Remembers `child` until it exits; keeps the tail of its output (see `tailOf`). */
  track(child: ChildProcess): ChildProcess {
    if (child.pid === undefined) return child;
    this.#live.add(child);
    child.once('exit', () => this.#live.delete(child));
    child.once('error', () => this.#live.delete(child));
    keepTail(child);
    return child;
  }

  get size(): number {
    return this.#live.size;
  }

  /** PIDs of the children that have not exited yet. */
  pids(): number[] {
    return [...this.#live].flatMap((child) => (child.pid === undefined ? [] : [child.pid]));
  }

  /** SIGTERM to every live child, SIGKILL to those still alive after `graceMs`; waits at most 2 x `graceMs`. */
  async stopAll(graceMs = 3000): Promise<void> {
    for (const child of this.#live) signalChild(child, 'SIGTERM');
    await this.#waitEmpty(graceMs);
    for (const child of this.#live) signalChild(child, 'SIGKILL');
    await this.#waitEmpty(graceMs);
  }

  /** For signal handlers, where nothing can be awaited: SIGKILL to every live child. */
  killAllSync(): void {
    for (const child of this.#live) signalChild(child, 'SIGKILL');
  }

  async #waitEmpty(timeoutMs: number): Promise<void> {
    const rounds = Math.ceil(timeoutMs / POLL_MS);
    for (let round = 0; round < rounds && this.#live.size > 0; round++) await sleep(POLL_MS);
  }
}

function signalChild(child: ChildProcess, signal: NodeJS.Signals): void {
  // Only a child that has not exited may be signalled: after its exit the PID may belong to another process.
  if (child.exitCode !== null || child.signalCode !== null) return;
  try {
    child.kill(signal);
  } catch {
    // Already gone between the check and the signal.
  }
}

const tails = new WeakMap<ChildProcess, { stdout: string; stderr: string }>();

function keepTail(child: ChildProcess): void {
  const tail = { stdout: '', stderr: '' };
  tails.set(child, tail);
  child.stdout?.setEncoding('utf8').on('data', (text: string) => {
    tail.stdout = (tail.stdout + text).slice(-TAIL_BYTES_MAX);
  });
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    tail.stderr = (tail.stderr + text).slice(-TAIL_BYTES_MAX);
  });
}

/** The last few KiB a tracked child wrote, for error messages. */
export function tailOf(child: ChildProcess): { stdout: string; stderr: string } {
  return tails.get(child) ?? { stdout: '', stderr: '' };
}

/** Resolves with the child's exit, or with undefined after `timeoutMs` (the child keeps running). */
export async function waitForExit(child: ChildProcess, timeoutMs: number): Promise<Exit | undefined> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return { code: child.exitCode, signal: child.signalCode };
  }
  const timeout = new AbortController();
  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', () => resolve({ code: null, signal: null }));
  });
  try {
    return await Promise.race([
      exited,
      sleep(timeoutMs, undefined, { signal: timeout.signal }).catch(() => undefined),
    ]);
  } finally {
    timeout.abort();
  }
}

/**
 * The first stdout match of `pattern` (checked line by line), or an error when the child exits, the
 * line grows past its limit, or `timeoutMs` passes first.
 */
export async function firstMatch(
  child: ChildProcess,
  pattern: RegExp,
  timeoutMs: number,
  what: string,
): Promise<RegExpExecArray> {
  const stdout = child.stdout;
  if (stdout === null) throw new Error(`${what}: stdout is not a pipe`);
  let pending = '';
  let onData: ((text: string) => void) | undefined;
  let onExit: (() => void) | undefined;
  let drainTimer: ReturnType<typeof setTimeout> | undefined;
  let onDrained: (() => void) | undefined;
  const timeout = new AbortController();
  const found = new Promise<RegExpExecArray>((resolve, reject) => {
    onData = (text: string): void => {
      pending += text;
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        const match = pattern.exec(line);
        if (match !== null) return resolve(match);
      }
      if (pending.length > LINE_BYTES_MAX)
        reject(new Error(`${what}: a stdout line exceeds ${LINE_BYTES_MAX} bytes`));
    };
    // 'exit' may come before the child's last stdout bytes are read (its pipe is drained after):
    // the line is looked for until stdout ends, or for EXIT_DRAIN_MS, before the exit counts.
    onDrained = (): void => {
      const tail = tailOf(child);
      reject(
        new Error(
          `${what} exited before printing ${String(pattern)}: ${tail.stderr.trim() || tail.stdout.trim()}`,
        ),
      );
    };
    onExit = (): void => {
      const drained = onDrained as () => void;
      if (stdout.readableEnded || stdout.destroyed) return drained();
      stdout.once('end', drained);
      stdout.once('close', drained);
      drainTimer = setTimeout(drained, EXIT_DRAIN_MS);
    };
    stdout.setEncoding('utf8').on('data', onData);
    child.once('exit', onExit);
    child.once('error', onExit);
  });
  const expired = sleep(timeoutMs, undefined, { signal: timeout.signal }).then(
    () => Promise.reject(new Error(`${what}: no ${String(pattern)} on stdout within ${timeoutMs} ms`)),
    () => new Promise<never>(() => undefined),
  );
  try {
    return await Promise.race([found, expired]);
  } finally {
    timeout.abort();
    clearTimeout(drainTimer);
    if (onData !== undefined) stdout.off('data', onData);
    if (onDrained !== undefined) {
      stdout.off('end', onDrained);
      stdout.off('close', onDrained);
    }
    if (onExit !== undefined) {
      child.off('exit', onExit);
      child.off('error', onExit);
    }
  }
}

/** SIGTERM, then SIGKILL after `graceMs` if it is still running; resolves once it exited or gave up. */
export async function stopChild(child: ChildProcess, graceMs = 3000): Promise<void> {
  signalChild(child, 'SIGTERM');
  if ((await waitForExit(child, graceMs)) !== undefined) return;
  signalChild(child, 'SIGKILL');
  await waitForExit(child, graceMs);
}

/** Signals that end a benchmark early; each gets the cleanup, then its default course. */
const TERMINATING_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * Runs `cleanup` synchronously, once, when the process is ending without having disposed of it:
 * on SIGINT, SIGTERM or SIGHUP (after which the signal takes its default course, ending the process,
 * unless another handler is still registered; that handler does the same) and on `exit`, which also
 * covers an uncaught exception. Returns a function that removes the handlers.
 */
export function onAbruptEnd(cleanup: (reason: NodeJS.Signals | 'exit') => void): () => void {
  const dispose = (): void => {
    for (const signal of TERMINATING_SIGNALS) process.off(signal, onSignal);
    process.off('exit', onExit);
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    dispose();
    cleanup(signal);
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  };
  const onExit = (): void => {
    dispose();
    cleanup('exit');
  };
  for (const signal of TERMINATING_SIGNALS) process.on(signal, onSignal);
  process.on('exit', onExit);
  return dispose;
}

/** Appends everything the child writes (stdout and stderr) to `path`, for looking at after a run. */
export function saveOutput(child: ChildProcess, path: string): void {
  const file = createWriteStream(path, { flags: 'a' });
  file.on('error', () => undefined);
  child.stdout?.pipe(file, { end: false });
  child.stderr?.pipe(file, { end: false });
  child.once('close', () => file.end());
}
