/**
 * Whether a model fits on the file system it is written to, decided before a byte is written: synth
 * (files written one after another, each replacing a file of its name) and the piece store (every
 * file of a pull or a join at once, less what is already there). Pure but for `freeSpaceAt`, which
 * asks the file system.
 */

import { lstat, stat, statfs } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { WeightcastError, isWeightcastError } from '../errors.js';
import { formatBytes } from './units.js';

export interface PlannedFile {
  bytes: number;
  /**
   * Bytes of it on the file system already: synth, the file of the same name the write replaces
   * (truncated first); the piece store, the blocks a partial or finished file holds.
   */
  replacedBytes: number;
}

/** Bytes the file system must have free: whole blocks, the largest running total in write order. */
export function spaceNeeded(files: readonly PlannedFile[], blockBytes: number): number {
  const blocks = (bytes: number): number => Math.ceil(bytes / blockBytes) * blockBytes;
  let running = 0;
  let peak = 0;
  for (const file of files) {
    running += blocks(file.bytes) - blocks(file.replacedBytes);
    peak = Math.max(peak, running);
  }
  return peak;
}

export interface SpaceCheck {
  dir: string;
  files: readonly PlannedFile[];
  blockBytes: number;
  /** What the file system has free for this process (`freeSpaceAt`). */
  freeBytes: number;
  /** Said after the size when some files are there already (synth: ' more than the files it replaces'). */
  beyond?: string;
}

/** IO (exit 1) when the model would fill the file system part way: the message says both numbers. */
export function checkFreeSpace(check: SpaceCheck): void {
  const neededBytes = spaceNeeded(check.files, check.blockBytes);
  if (neededBytes <= check.freeBytes) return;
  const beyond = check.files.some((file) => file.replacedBytes > 0) ? (check.beyond ?? '') : '';
  throw new WeightcastError(
    'IO',
    `not enough free space for the model in ${check.dir}: it needs ${formatBytes(neededBytes)}${beyond}, ` +
      `the file system has ${formatBytes(check.freeBytes)} free; nothing was written`,
    { file: check.dir, neededBytes, freeBytes: check.freeBytes },
  );
}

/**
 * The free space and block size of the file system `dir` is on (its closest existing ancestor, if
 * it does not exist yet). Free is what this process may use: `df`'s available for a user, and the
 * blocks the file system keeps for root as well when running as root.
 */
export async function freeSpaceAt(dir: string): Promise<{ freeBytes: number; blockBytes: number }> {
  const fileSystem = await statfs(await nearestExisting(dir));
  const root = process.getuid?.() === 0;
  return {
    freeBytes: (root ? fileSystem.bfree : fileSystem.bavail) * fileSystem.bsize,
    blockBytes: fileSystem.bsize,
  };
}

/** The bytes of blocks a regular file at `path` holds (a sparse file only its written ones); 0 for anything else. */
export async function allocatedBytes(path: string): Promise<number> {
  const found = await lstat(path).catch(() => undefined);
  return found?.isFile() === true ? found.blocks * 512 : 0;
}

/**
 * Each file as `checkFreeSpace` counts it when its copy may already stand, in part or whole, at its
 * path under one of `dirs` (a partial file, a file at its final name): the most blocks found there.
 */
export async function filesHeldIn(
  files: ReadonlyArray<{ path: string; size: number }>,
  dirs: readonly string[],
): Promise<PlannedFile[]> {
  return Promise.all(
    files.map(async (file) => {
      const there = await Promise.all(dirs.map((dir) => allocatedBytes(join(dir, file.path))));
      return { bytes: file.size, replacedBytes: Math.min(file.size, Math.max(0, ...there)) };
    }),
  );
}

/** Whether `error` is checkFreeSpace's refusal (nothing was written for it). */
export function isNoRoom(error: unknown): boolean {
  return isWeightcastError(error, 'IO') && error.details['neededBytes'] !== undefined;
}

/** The device `dir` (or its closest existing ancestor) is on: two paths on one file system share it. */
export async function deviceOf(dir: string): Promise<number> {
  return (await stat(await nearestExisting(dir))).dev;
}

/** The directory itself, or the closest ancestor that exists: where its files will land. */
async function nearestExisting(dir: string): Promise<string> {
  let path = dir;
  for (;;) {
    const found = await stat(path).catch((error: NodeJS.ErrnoException) => error);
    if (!(found instanceof Error)) return path;
    if (found.code !== 'ENOENT' || dirname(path) === path) throw found;
    path = dirname(path);
  }
}
