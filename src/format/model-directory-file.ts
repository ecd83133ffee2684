/** Checking a directory before a model is written into it (the rule: model-directory.ts). */

import { readdir } from 'node:fs/promises';
import { asIoError } from '../errors.js';
import { staleModelFiles, staleModelFilesError } from './model-directory.js';

/**
 * The names at the top of `dir`: none when it does not exist, nor when it is no directory (the
 * writer's own mkdir or open then says what is wrong, as it did before this check).
 */
async function listDirectoryNames(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    throw asIoError(error, `listing ${dir}`);
  }
}

/**
 * Refuses (USAGE) when `dir` holds model files that writing `written` into it would leave in place;
 * else returns the names at the top of `dir`, for a caller that wants to know what is replaced.
 */
export async function refuseStaleModelFiles(dir: string, written: Iterable<string>): Promise<string[]> {
  const present = await listDirectoryNames(dir);
  const stale = staleModelFiles(present, written);
  if (stale.length > 0) throw staleModelFilesError(dir, stale);
  return present;
}
