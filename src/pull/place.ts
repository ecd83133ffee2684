/**
 * Placing a model's verified files from one directory of this machine into another without reading
 * them: a reflink (the file system shares the blocks, copy-on-write), a hard link when asked for,
 * or else a kernel-side copy (`copy_file_range`). No byte passes through this process and none is
 * hashed again, so the source must be one nobody else writes: the agent's own cache.
 *
 * Every file is made under a partial name in `DIR/.weightcast/place/`, synced, then renamed to its
 * final name (final-file.ts, as the pull does), so a file under its final name is always complete.
 */

import { constants } from 'node:fs';
import { pathWithoutSymlinks } from '../util/no-symlinks.js';
import { copyFile, link, mkdir, open, rm, rmdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { WeightcastError, abortError } from '../errors.js';
import type { Manifest } from '../manifest/manifest.js';
import { STATE_DIR_NAME } from './destination.js';
import { moveToFinalName } from '../piece/final-file.js';
import { checkFreeSpace, deviceOf, filesHeldIn, freeSpaceAt } from '../util/free-space.js';

/** How a file reached its destination. */
export type PlaceMethod = 'reflink' | 'copy' | 'link';

export interface PlaceOptions {
  /** `link`: hard links where the two directories share a file system (else as `copy`). */
  mode?: 'copy' | 'link';
  signal?: AbortSignal;
}

export interface PlaceResult {
  /** Files by the method that placed them. */
  methods: Record<PlaceMethod, number>;
  bytes: number;
}

const PLACE_DIR = join(STATE_DIR_NAME, 'place');

/** Whether any file of `manifest` already stands in `to` (then only a verified pull may adopt it). */
export async function someFilesPresent(to: string, manifest: Manifest): Promise<boolean> {
  const found = await Promise.all(
    manifest.files.map(
      async (file) => (await stat(join(to, file.path)).catch(() => undefined)) !== undefined,
    ),
  );
  return found.includes(true);
}

/**
 * IO when the file system of `to` lacks room for the files a copy of `manifest` out of `from` would
 * write there (less the blocks of files already standing in `to`): a pull through an agent that
 * cannot write into its destination asks this as soon as the agent has joined, not once the agent
 * holds the whole model. Unchecked when both are on one file system: a reflink or a hard link there
 * takes no room (where the file system can do neither, a copy that fills it ends in ENOSPC, as
 * before).
 */
export async function checkPlaceSpace(
  from: string | undefined,
  to: string,
  manifest: Manifest,
): Promise<void> {
  const [fromDevice, toDevice] = await Promise.all([
    from === undefined ? undefined : deviceOf(from).catch(() => undefined),
    deviceOf(to),
  ]);
  if (fromDevice !== undefined && fromDevice === toDevice) return;
  const files = await filesHeldIn(manifest.files, [to]);
  checkFreeSpace({ dir: to, files, ...(await freeSpaceAt(to)), beyond: ' beyond the files already there' });
}

/**
 * Places every file of `manifest` from `from` into `to`. Refuses (PULL_DESTINATION_CONFLICT) when
 * something already stands at a file's final name: whether it is the model's file would take a hash.
 */
export async function placeFiles(
  from: string,
  to: string,
  manifest: Manifest,
  options: PlaceOptions = {},
): Promise<PlaceResult> {
  const methods: Record<PlaceMethod, number> = { reflink: 0, copy: 0, link: 0 };
  let bytes = 0;
  const partialRoot = join(to, PLACE_DIR);
  for (const file of manifest.files) {
    if (options.signal?.aborted === true) throw abortError(options.signal, 'placing the files');
    const target = await pathWithoutSymlinks(to, file.path);
    if ((await stat(target).catch(() => undefined)) !== undefined) {
      throw new WeightcastError('PULL_DESTINATION_CONFLICT', `${target} already exists; move it away first`, {
        file: target,
      });
    }
    const partial = await pathWithoutSymlinks(to, `${PLACE_DIR}/${file.path}`);
    await mkdir(dirname(partial), { recursive: true });
    await rm(partial, { force: true });
    const method = await placeOne(join(from, file.path), partial, options.mode ?? 'copy');
    // A copy is synced before its rename; a hard link shares the cache's blocks as they are.
    const handle = method === 'link' ? undefined : await open(partial, 'r+');
    try {
      await moveToFinalName(handle, partial, to, file.path);
    } finally {
      await handle?.close();
    }
    methods[method]++;
    bytes += file.size;
  }
  await rm(partialRoot, { recursive: true, force: true });
  // The state folder goes too when nothing else (a pull's journal) is in it; while the pull's lock
  // is, the lock's release removes it (pull/destination.ts).
  await rmdir(join(to, STATE_DIR_NAME)).catch(() => undefined);
  return { methods, bytes };
}

async function placeOne(source: string, partial: string, mode: 'copy' | 'link'): Promise<PlaceMethod> {
  if (mode === 'link') {
    try {
      await link(source, partial);
      return 'link';
    } catch (error) {
      // Another file system: hard links cannot cross it, copy instead.
      if (codeOf(error) !== 'EXDEV') throw ioError(error, source);
    }
  }
  try {
    await copyFile(source, partial, constants.COPYFILE_FICLONE_FORCE);
    return 'reflink';
  } catch (error) {
    // No reflinks here (ext4, tmpfs, or two file systems): the kernel copies instead.
    if (codeOf(error) === 'ENOENT' || codeOf(error) === 'EACCES') throw ioError(error, source);
  }
  try {
    await copyFile(source, partial);
    return 'copy';
  } catch (error) {
    throw ioError(error, source);
  }
}

function codeOf(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}

function ioError(error: unknown, path: string): WeightcastError {
  return new WeightcastError(
    'IO',
    `cannot place ${path}: ${(error as Error).message}`,
    { file: path },
    { cause: error },
  );
}
