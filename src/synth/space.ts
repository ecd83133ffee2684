/**
 * Whether a model fits on its destination's file system, decided before a byte is written. The files
 * are written one after another and each replaces (truncates) any file of its name first, so the
 * most the run ever adds is the largest running total of new blocks less replaced blocks. Pure:
 * synth.ts asks the file system for the sizes and the free space.
 */

import { WeightcastError } from '../errors.js';
import { formatBytes } from '../util/units.js';

export interface PlannedFile {
  bytes: number;
  /** The size of the file of the same name the write replaces (0 when there is none). */
  replacedBytes: number;
}

/** Bytes the file system must have free: whole blocks, in write order. */
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
  /** What the file system has free for this user (statfs `bavail` x `bsize`, as `df` says). */
  freeBytes: number;
}

/** IO (exit 1) when the model would fill the file system part way: the message says both numbers. */
export function checkFreeSpace(check: SpaceCheck): void {
  const neededBytes = spaceNeeded(check.files, check.blockBytes);
  if (neededBytes <= check.freeBytes) return;
  const replaced = check.files.some((file) => file.replacedBytes > 0)
    ? ' more than the files it replaces'
    : '';
  throw new WeightcastError(
    'IO',
    `not enough free space for the model in ${check.dir}: it needs ${formatBytes(neededBytes)}${replaced}, ` +
      `the file system has ${formatBytes(check.freeBytes)} free; nothing was written`,
    { file: check.dir, neededBytes, freeBytes: check.freeBytes },
  );
}
