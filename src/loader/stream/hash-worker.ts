/**
 * Worker thread body for the loader's hash pool: SHA-256 of ranges of the shared arena. The arena
 * arrives once, in workerData; a job is just an offset and a length, so no bytes cross threads.
 */

import { createHash } from 'node:crypto';
import { parentPort, workerData } from 'node:worker_threads';
import type { ArenaHashJob, ArenaHashResult } from './hash-pool.js';

const arena = (workerData as { arena: SharedArrayBuffer }).arena;

parentPort?.on('message', (job: ArenaHashJob) => {
  let result: ArenaHashResult;
  try {
    const view = new Uint8Array(arena, job.offset, job.length);
    result = { id: job.id, digest: createHash('sha256').update(view).digest('hex') };
  } catch (error) {
    result = { id: job.id, error: error instanceof Error ? error.message : String(error) };
  }
  parentPort?.postMessage(result);
});
