/** Flags naming a directory that the command makes when it is missing (`pull --to`, `agent --cache`). */

import { stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { WeightcastError } from '../../errors.js';

/**
 * Refuses (USAGE) a path that is there but is no directory, or that runs through a file, so the
 * user reads which flag is wrong instead of an EEXIST or ENOTDIR from a mkdir deep in the command.
 * A missing path is fine (the command makes it); any other problem the command meets itself.
 */
export async function checkDirectoryFlag(path: string, flag: string): Promise<void> {
  const found = await stat(path).catch((error: NodeJS.ErrnoException) => error);
  if (found instanceof Error) {
    if (found.code !== 'ENOTDIR') return;
    const file = await fileAbove(path);
    const why = file === undefined ? '' : `: ${file} is a file`;
    throw new WeightcastError('USAGE', `${flag} ${path} is not a directory${why}`, { file: path });
  }
  if (found.isFile())
    throw new WeightcastError('USAGE', `${flag} ${path} is a file, not a directory`, { file: path });
  if (!found.isDirectory())
    throw new WeightcastError('USAGE', `${flag} ${path} is not a directory`, { file: path });
}

/** The file standing where `path` needs a directory: its nearest ancestor that exists. */
async function fileAbove(path: string): Promise<string | undefined> {
  for (let parent = dirname(path); parent !== dirname(parent); parent = dirname(parent)) {
    const found = await stat(parent).catch(() => undefined);
    if (found !== undefined) return found.isDirectory() ? undefined : parent;
  }
  return undefined;
}
