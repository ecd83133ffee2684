/**
 * SHA-256 of arena ranges on worker threads. The manifest's HashPool moves a whole ArrayBuffer to a
 * worker and back, which cannot work for pieces that live side by side in one arena and are hashed
 * while their neighbours are still being read; here the arena is a SharedArrayBuffer every worker
 * maps once, and a job names a range of it. The caller guarantees nobody writes the range meanwhile.
 */

import { WeightcastError } from '../../errors.js';
import { WorkerPool } from '../../util/worker-pool.js';

export interface ArenaHashJob {
  id: number;
  offset: number;
  length: number;
}

export interface ArenaHashResult {
  id: number;
  digest?: string;
  error?: string;
}

export class ArenaHashPool {
  private readonly pool: WorkerPool<ArenaHashJob, ArenaHashResult>;
  private nextId = 1;

  constructor(arena: SharedArrayBuffer, threads: number) {
    this.pool = new WorkerPool(new URL('./hash-worker.js', import.meta.url), threads, 'hash pool', {
      arena,
    });
  }

  /** Jobs run in submission order; a closed pool rejects what is still queued or running. */
  async hash(offset: number, length: number): Promise<string> {
    const result = await this.pool.run({ id: this.nextId++, offset, length });
    if (result.digest !== undefined) return result.digest;
    throw new WeightcastError('IO', `hashing failed: ${result.error ?? 'unknown error'}`);
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}
