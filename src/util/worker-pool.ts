/**
 * A fixed set of worker threads running one script, with a FIFO queue of jobs: a job goes to the
 * next idle worker, its answer is the worker's next message. Idle workers do not keep the process
 * alive. A worker that crashes fails its job and is replaced; a job whose signal aborted before it
 * started is dropped, and one that aborted while running finishes and is then rejected (jobs are
 * bounded in size). close() rejects whatever is queued or running and stops the workers.
 *
 * The hashing pools (manifest/hash-pool.ts, loader/stream/hash-pool.ts) are typed wrappers of this.
 */

import { Worker, type TransferListItem } from 'node:worker_threads';
import { WeightcastError, abortError } from '../errors.js';

export interface WorkerJobOptions {
  /** Moved to the worker with the job (the caller's copies are detached until it answers). */
  transfer?: readonly TransferListItem[];
  signal?: AbortSignal | undefined;
}

interface Pending<Request, Answer> {
  request: Request;
  options: WorkerJobOptions;
  resolve: (answer: Answer) => void;
  reject: (error: Error) => void;
}

export class WorkerPool<Request, Answer> {
  private readonly idle: Worker[] = [];
  private readonly all: Worker[] = [];
  private readonly queue: Array<Pending<Request, Answer>> = [];
  private readonly running = new Map<Worker, Pending<Request, Answer>>();
  private closed = false;

  /** `what` names the pool in errors ("hash pool"); `workerData` goes to every worker. */
  constructor(
    private readonly script: URL,
    threads: number,
    private readonly what: string,
    private readonly workerData?: unknown,
  ) {
    for (let i = 0; i < Math.max(1, threads); i++) this.idle.push(this.spawn());
  }

  get threads(): number {
    return this.all.length;
  }

  run(request: Request, options: WorkerJobOptions = {}): Promise<Answer> {
    if (this.closed) return Promise.reject(this.closedError());
    if (options.signal?.aborted === true) return Promise.reject(abortError(options.signal, this.what));
    // No abort listener per job: a queued job is dropped when it reaches the front of the queue.
    return new Promise<Answer>((resolve, reject) => {
      this.queue.push({ request, options, resolve, reject });
      this.pump();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.splice(0)) pending.reject(this.closedError());
    for (const [worker, pending] of this.running) {
      this.running.delete(worker);
      pending.reject(this.closedError());
    }
    await Promise.all(this.all.map((worker) => worker.terminate()));
  }

  private closedError(): WeightcastError {
    return new WeightcastError('ABORTED', `the ${this.what} is closed`);
  }

  private spawn(): Worker {
    const worker = new Worker(
      this.script,
      this.workerData === undefined ? {} : { workerData: this.workerData },
    );
    worker.on('message', (answer: Answer) => this.finish(worker, answer));
    worker.on('error', (error) => this.fail(worker, error));
    worker.unref();
    this.all.push(worker);
    return worker;
  }

  private pump(): void {
    while (!this.closed && this.idle.length > 0 && this.queue.length > 0) {
      const worker = this.idle.pop() as Worker;
      const pending = this.queue.shift() as Pending<Request, Answer>;
      const signal = pending.options.signal;
      if (signal?.aborted === true) {
        this.idle.push(worker);
        pending.reject(abortError(signal, this.what));
        continue;
      }
      this.running.set(worker, pending);
      worker.ref();
      worker.postMessage(pending.request, pending.options.transfer);
    }
  }

  private finish(worker: Worker, answer: Answer): void {
    const pending = this.running.get(worker);
    this.running.delete(worker);
    worker.unref();
    this.idle.push(worker);
    const signal = pending?.options.signal;
    if (signal?.aborted === true) pending?.reject(abortError(signal, this.what));
    else pending?.resolve(answer);
    this.pump();
  }

  /** A crashed worker fails its job; a fresh one takes its place. */
  private fail(worker: Worker, error: Error): void {
    const pending = this.running.get(worker);
    this.running.delete(worker);
    this.all.splice(this.all.indexOf(worker), 1);
    pending?.reject(
      new WeightcastError('IO', `a ${this.what} worker failed: ${error.message}`, {}, { cause: error }),
    );
    if (!this.closed) {
      this.idle.push(this.spawn());
      this.pump();
    }
  }
}
