/**
 * What a pull keeps in its destination: the state directory `.weightcast` (partial files, journal,
 * manifest: pull.ts; `swarm/` for swarm-pull.ts; `agent/`, the partial files the agent writes for
 * a pull through it: agent-pull.ts; `place/` for place.ts) and the lock that lets one pull at a
 * time write there. Two pulls into one directory, from the origin, with `--scheduler` or through
 * the agent, would both write a model there at once (fetching it twice, moving each other's partial
 * files away); the second is refused at once instead.
 * The lock is `.weightcast/pull.lock` holding the pull's PID (util/pid-lock.ts): released however
 * the pull ends, taken over from a pull that was killed. Through the agent, the pull process holds
 * it and the agent writes on its behalf beside it, never touching it.
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
 * writes (a source that does not answer) leaves nothing behind. `.weightcast` goes with the lock
 * whenever it is left empty, made by this pull or not: the agent and placement remove their folders
 * and then `.weightcast` once they are done, which they cannot do while the lock is in it.
 */
export async function lockDestination(dest: string): Promise<() => Promise<void>> {
  const stateDir = join(dest, STATE_DIR_NAME);
  const made = await missingDirectories(stateDir);
  const removeEmpty = async (dirs: readonly string[]): Promise<void> => {
    // Deepest first; one that is not empty keeps its parents too.
    for (const dir of dirs)
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
    await removeEmpty(made);
    throw asIoError(error, `cannot write into ${dest}`);
  }
  return async () => {
    await release();
    // `made` starts with the state directory when this pull made it.
    await removeEmpty(made.length > 0 ? made : [stateDir]);
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
