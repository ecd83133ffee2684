/**
 * `mkdir -p` that says why it failed. Node 20's recursive mkdir reports ENOENT for a level it could
 * not make, whatever the reason (EROFS on a read-only file system, EACCES, ...): the missing levels
 * are then made one at a time, and the first that fails throws its own error.
 */

import { mkdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';

export async function makeDirectory(path: string): Promise<void> {
  try {
    await mkdir(path, { recursive: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    await makeLevels(path);
  }
}

async function makeLevels(path: string): Promise<void> {
  const missing: string[] = [];
  for (let dir = path; dir !== dirname(dir); dir = dirname(dir)) {
    if (
      await stat(dir).then(
        () => true,
        () => false,
      )
    )
      break;
    missing.push(dir);
  }
  for (const dir of missing.reverse()) {
    await mkdir(dir).catch((error: NodeJS.ErrnoException) => {
      // Made meanwhile by another process: as good.
      if (error.code !== 'EEXIST') throw error;
    });
  }
}
