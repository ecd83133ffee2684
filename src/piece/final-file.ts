/**
 * The last steps of a verified file, shared by everything that writes one for a user (a PieceStore
 * bound for a destination, the pull's included, and placement): its bytes flushed to disk in the
 * background while it fills (Writeback), then synced, renamed to its final name (never through a
 * symlink, never over a directory) and the rename made durable by syncing the directory. So a file
 * under its final name is always complete and verified, after a crash too.
 */

import { mkdir, open, rename, stat, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { WeightcastError } from '../errors.js';
import { writeAllSync } from '../util/direct-write.js';
import { pathWithoutSymlinks } from '../util/no-symlinks.js';

/**
 * A file bound for a final name is flushed in the background every this many written bytes, so the
 * disk works while the network does and the sync before its rename has little left to do.
 */
export const WRITEBACK_BYTES = 64 * 1024 * 1024;

/**
 * Background flushes of one file being filled. A flush's error is kept for `settled`: Linux reports
 * a writeback error (EIO) to one sync of an open file, so the sync before the rename, on the same
 * handle, would not hear of it again and a file the disk never took would be renamed into place.
 */
export class Writeback {
  private unflushed = 0;
  private flushing: Promise<void> | undefined;
  private failure: Error | undefined;

  constructor(private readonly handle: () => Promise<FileHandle> | FileHandle) {}

  /** `bytes` more were written; `last` when the file's final piece is among them (its sync follows). */
  wrote(bytes: number, last: boolean): void {
    this.unflushed += bytes;
    if (this.unflushed < WRITEBACK_BYTES || this.flushing !== undefined || last) return;
    this.unflushed = 0;
    this.flushing = Promise.resolve(this.handle())
      .then((handle) => handle.datasync())
      .catch((error: unknown) => {
        this.failure ??= error instanceof Error ? error : new Error(String(error));
      })
      .finally(() => {
        this.flushing = undefined;
      });
  }

  /** Resolves once no background flush is under way; rejects with the error of one that failed. */
  async settled(): Promise<void> {
    await this.flushing;
    if (this.failure !== undefined) throw this.failure;
  }
}

/**
 * Syncs the verified file open as `handle` at `partialPath` (no handle: the caller synced it, or its
 * bytes need no sync here, as a hard link's), renames it to `relativePath` under `finalDir` and syncs
 * that directory. The handle stays open (a store may serve from it).
 */
export async function moveToFinalName(
  handle: FileHandle | undefined,
  partialPath: string,
  finalDir: string,
  relativePath: string,
): Promise<string> {
  await handle?.datasync();
  const target = await pathWithoutSymlinks(finalDir, relativePath);
  await mkdir(dirname(target), { recursive: true });
  const existing = await stat(target).catch(() => undefined);
  if (existing?.isDirectory() === true) {
    throw new WeightcastError(
      'PULL_DESTINATION_CONFLICT',
      `${target} is a directory, but the model has a file there`,
      { file: relativePath },
    );
  }
  await rename(partialPath, target);
  await syncDirectory(dirname(target));
  return target;
}

async function syncDirectory(path: string): Promise<void> {
  const handle = await open(path, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Writes all of `bytes` at `position`; a write that makes no progress is an `IO` error. */
export async function writeFully(handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, position + done);
    if (bytesWritten <= 0) throw new WeightcastError('IO', 'write made no progress');
    done += bytesWritten;
  }
}

/**
 * writeFully as synchronous system calls on this thread (write-policy.ts says when); errors (ENOSPC,
 * EIO) are thrown, and so reject the caller's promise as the pool's would.
 */
export function writeFullySync(handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  writeAllSync(handle.fd, bytes, 0, bytes.length, position);
  return Promise.resolve();
}
