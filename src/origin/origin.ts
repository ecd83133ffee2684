/**
 * An origin is where a model's bytes live first: a local directory or an HTTP(S) server. Every
 * implementation offers the same three reads, each taking an AbortSignal: list the files, stat one,
 * and read an exact byte range. Reads return exactly the bytes asked for or throw a typed error
 * (ORIGIN_SHORT_READ, ORIGIN_NOT_FOUND, ...); retries happen inside the implementation.
 */

import { isWeightcastError } from '../errors.js';

export interface OriginEntry {
  /** Relative POSIX path inside the model, e.g. `model-00001-of-00004.safetensors`. */
  path: string;
  size: number;
}

export interface OriginCallOptions {
  signal?: AbortSignal;
  /**
   * `readInto` only: the read adds every byte it lands in the target to `filled` as it arrives, so
   * the caller can watch a long read (HTTP origins do; local reads may only count at the end).
   * HTTP origins also note when the first byte landed (`performance.now()`), so a caller can tell
   * a read's rate apart from the time it waited for a connection.
   */
  progress?: ReadProgress;
}

/** A read's landed bytes, counted as they arrive (`landed`). */
export interface ReadProgress {
  filled: number;
  /** `performance.now()` when the read's first byte landed (HTTP origins; unset before). */
  firstByteMs?: number;
  /** Called once, when `firstByteMs` is set. */
  onFirstByte?: () => void;
  /**
   * When `filled` reaches this, `onWatch` is called once (and `watchAt` cleared; the callee may set
   * it again): a caller follows a read's progress on its bytes' arrival instead of on timers.
   */
  watchAt?: number | undefined;
  onWatch?: (() => void) | undefined;
}

/** Counts `count` bytes landed by a read, and calls its watcher once they reach its mark. */
export function landed(progress: ReadProgress, count: number): void {
  progress.filled += count;
  const watchAt = progress.watchAt;
  if (watchAt !== undefined && progress.filled >= watchAt) {
    progress.watchAt = undefined;
    progress.onWatch?.();
  }
}

export interface Origin {
  /** Human-readable location, e.g. `file:///models/llama` or `https://hub/x/resolve/main`. */
  readonly location: string;
  /** All files of the model, sorted by path. */
  list(options?: OriginCallOptions): Promise<OriginEntry[]>;
  stat(path: string, options?: OriginCallOptions): Promise<OriginEntry>;
  /** Fills `target` completely with the bytes at [offset, offset + target.length) of `path`. */
  readInto(path: string, offset: number, target: Uint8Array, options?: OriginCallOptions): Promise<void>;
  /**
   * For origins backed by local files: the filesystem path of `path`, so hashing and copying can read
   * the file directly. Remote origins leave this undefined.
   */
  localPath?(path: string): string;
  /** Releases connections and file handles. */
  close(): Promise<void>;
}

/** Counters every origin keeps, for progress output and benchmarks. */
export interface OriginStats {
  requests: number;
  retries: number;
  bytesRead: number;
}

/**
 * Origin failures that reading again cannot fix. An origin retries its transient failures itself
 * (HTTP: 5xx, resets, timeouts, short bodies, within its retry budget, then ORIGIN_RETRIES_EXHAUSTED),
 * so an error that leaves a read is final unless it is an abort or still marked `retryable`: the
 * file is not there (404), access is refused, the file is shorter than the manifest says, the
 * server ignores ranges, the outage outlasted the budget. A swarm member stops its model on these
 * rather than have the scheduler assign the same read again and again.
 */
export function isFinalOriginError(error: unknown): boolean {
  return isWeightcastError(error) && error.code !== 'ABORTED' && error.details.retryable !== true;
}
