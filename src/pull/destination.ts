/**
 * What a pull keeps in its destination: the state directory `.weightcast` (partial files, journal,
 * manifest: pull.ts, and `swarm/` for swarm-pull.ts) and the lock that lets one pull at a time
 * write there. Two pulls into one directory, from the origin or with `--scheduler`, would both fetch
 * the whole model and move each other's partial files away; the second is refused at once instead.
 * The lock is `.weightcast/pull.lock` holding the pull's PID (util/pid-lock.ts): released however
 * the pull ends, taken over from a pull that was killed.
 */

import { rmdir, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { WeightcastError, asIoError } from '../errors.js';
import { takePidLock } from '../util/pid-lock.js';

export const STATE_DIR_NAME = '.weightcast';
export const PULL_LOCK_FILE = 'pull.lock';

/**
 * Takes the lock of `dest` for this process and returns its release; PULL_DESTINATION_IN_USE while
 * another live pull holds it. The directories made only to hold the lock (the destination, its
 * `.weightcast`) go again with it if nothing else was put in them, so a pull that fails before it
 * writes (a source that does not answer) leaves nothing behind.
 */
export async function lockDestination(dest: string): Promise<() => Promise<void>> {
  const stateDir = join(dest, STATE_DIR_NAME);
  const made = await missingDirectories(stateDir);
  const removeEmptyMade = async (): Promise<void> => {
    // Deepest first; one that is not empty keeps its parents too.
    for (const dir of made)
      if (
        !(await rmdir(dir).then(
          () => true,
          () => false,
        ))
      )
        return;
  };
  const path = join(stateDir, PULL_LOCK_FILE);
  const inUse = (owner: number): WeightcastError =>
    new WeightcastError(
      'PULL_DESTINATION_IN_USE',
      `another pull (PID ${owner}) is writing into ${dest}: wait for it to end, or pull into another --to`,
      { file: path, pid: owner },
    );
  let release: () => Promise<void>;
  try {
    release = await takePidLock(path, inUse);
  } catch (error) {
    await removeEmptyMade();
    throw asIoError(error, `cannot write into ${dest}`);
  }
  return async () => {
    await release();
    await removeEmptyMade();
  };
}

/** `path` and those of its parents that do not exist yet, deepest first. */
async function missingDirectories(path: string): Promise<string[]> {
  const missing: string[] = [];
  for (let dir = resolve(path); dir !== dirname(dir); dir = dirname(dir)) {
    if (
      await stat(dir).then(
        () => true,
        () => false,
      )
    )
      break;
    missing.push(dir);
  }
  return missing;
}
