/**
 * A lock file holding its owner's PID, for work that two processes on one machine must not do at
 * once (two agents on one cache, two applies of one model). Taken with an exclusive create; a lock
 * whose process is gone (killed, crashed) is taken over. Released by deleting the file; a process
 * that dies leaves it behind, and the next taker finds its PID dead.
 */

import { open, readFile, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { makeDirectory } from './make-directory.js';

/**
 * Takes the lock at `path` for this process and returns its release. While a live process holds it,
 * throws `held(owner)` (the caller's own error, naming the owner's PID); the file system's error if
 * the file cannot be made.
 */
export async function takePidLock(
  path: string,
  held: (owner: number) => Error,
): Promise<() => Promise<void>> {
  await makeDirectory(dirname(path));
  // Two tries: the second after taking over a lock its dead owner left.
  for (let attempt = 0; ; attempt++) {
    try {
      const handle = await open(path, 'wx');
      try {
        await handle.writeFile(`${process.pid}\n`);
      } finally {
        await handle.close();
      }
      return async () => {
        await unlink(path).catch(() => undefined);
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 1) throw error;
      const owner = Number((await readFile(path, 'utf8').catch(() => '')).trim());
      if (Number.isSafeInteger(owner) && owner > 0 && owner !== process.pid && processAlive(owner)) {
        throw held(owner);
      }
      await unlink(path).catch(() => undefined);
    }
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
