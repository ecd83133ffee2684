/**
 * SHA-256 of arena ranges on worker threads. The manifest's HashPool moves a whole ArrayBuffer to a
 * worker and back, which cannot work for pieces that live side by side in one arena and are hashed
 * while their neighbours are still being read; here the arena is a SharedArrayBuffer every worker
 * maps once, and a job names a range of it. The caller guarantees nobody writes the range meanwhile.
 */

import { Worker } from 'node:worker_threads';
import { WeightcastError } from '../../errors.js';

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

interface Pending {
  job: ArenaHashJob;
  resolve: (digest: string) => void;
  reject: (error: Error) => void;
}

export class ArenaHashPool {
  private readonly idle: Worker[] = [];
  private readonly all: Worker[] = [];
  private readonly queue: Pending[] = [];
  private readonly running = new Map<Worker, Pending>();
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly arena: SharedArrayBuffer,
    threads: number,
  ) {
    for (let i = 0; i < Math.max(1, threads); i++) this.idle.push(this.spawn());
  }

  /** Jobs run in submission order; a closed pool rejects what is still queued. */
  hash(offset: number, length: number): Promise<string> {
    if (this.closed) return Promise.reject(new WeightcastError('ABORTED', 'the hash pool is closed'));
    return new Promise<string>((resolve, reject) => {
      this.queue.push({ job: { id: this.nextId++, offset, length }, resolve, reject });
      this.pump();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.splice(0)) {
      pending.reject(new WeightcastError('ABORTED', 'the hash pool is closed'));
    }
    for (const [worker, pending] of this.running) {
      this.running.delete(worker);
      pending.reject(new WeightcastError('ABORTED', 'the hash pool is closed'));
    }
    await Promise.all(this.all.map((worker) => worker.terminate()));
  }

  private spawn(): Worker {
    const worker = new Worker(new URL('./hash-worker.js', import.meta.url), {
      workerData: { arena: this.arena },
    });
    worker.on('message', (result: ArenaHashResult) => this.finish(worker, result));
    worker.on('error', (error) => this.fail(worker, error));
    worker.unref();
    this.all.push(worker);
    return worker;
  }

  private pump(): void {
    while (!this.closed && this.idle.length > 0 && this.queue.length > 0) {
      const worker = this.idle.pop() as Worker;
      const pending = this.queue.shift() as Pending;
      this.running.set(worker, pending);
      worker.ref();
      worker.postMessage(pending.job);
    }
  }

  private finish(worker: Worker, result: ArenaHashResult): void {
    const pending = this.running.get(worker);
    this.running.delete(worker);
    worker.unref();
    this.idle.push(worker);
    if (pending !== undefined) {
      if (result.digest !== undefined) pending.resolve(result.digest);
      else pending.reject(new WeightcastError('IO', `hashing failed: ${result.error ?? 'unknown error'}`));
    }
    this.pump();
  }

  /** A crashed worker fails its job; a fresh one takes its place. */
  private fail(worker: Worker, error: Error): void {
    const pending = this.running.get(worker);
    this.running.delete(worker);
    this.all.splice(this.all.indexOf(worker), 1);
    pending?.reject(
      new WeightcastError('IO', `a hash worker failed: ${error.message}`, {}, { cause: error }),
    );
    if (!this.closed) {
      this.idle.push(this.spawn());
      this.pump();
    }
  }
}
