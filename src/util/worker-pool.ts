/**
 * A fixed set of worker threads running one script, with a FIFO queue of jobs: a job goes to the
 * next idle worker, its answer is the worker's next message. Idle workers do not keep the process
 * alive. A worker that crashes fails its job and is replaced, unless FAILED_STARTS_MAX workers in a
 * row died before their first answer: then the pool fails every job, now and later, with one typed
 * error instead of replacing them again and again (a missing script, or a process that cannot start
 * more threads, would otherwise spin a core). A job whose signal aborted before it
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

/**
 * Workers in a row that died before their first answer after which the pool stops replacing them
 * (any answer starts the count again): three, so a job that crashes a fresh worker now and then
 * does not end the pool.
 */
export const FAILED_STARTS_MAX = 3;

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
  /** Workers that answered a job: one that dies later had started fine. */
  private readonly answered = new WeakSet<Worker>();
  private failedStarts = 0;
  /** Set once FAILED_STARTS_MAX workers in a row died before answering: every job fails with it. */
  private broken: WeightcastError | undefined;

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
    if (this.broken !== undefined) return Promise.reject(this.broken);
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
    this.answered.add(worker);
    this.failedStarts = 0;
    worker.unref();
    this.idle.push(worker);
    const signal = pending?.options.signal;
    if (signal?.aborted === true) pending?.reject(abortError(signal, this.what));
    else pending?.resolve(answer);
    this.pump();
  }

  /** A crashed worker fails its job; a fresh one takes its place, unless workers cannot start. */
  private fail(worker: Worker, error: Error): void {
    const pending = this.running.get(worker);
    this.running.delete(worker);
    this.all.splice(this.all.indexOf(worker), 1);
    pending?.reject(
      new WeightcastError('IO', `a ${this.what} worker failed: ${error.message}`, {}, { cause: error }),
    );
    if (this.closed || this.broken !== undefined) return;
    if (!this.answered.has(worker)) this.failedStarts++;
    if (this.failedStarts < FAILED_STARTS_MAX) {
      this.idle.push(this.spawn());
      this.pump();
      return;
    }
    this.broken = new WeightcastError(
      'IO',
      `the ${this.what}'s worker threads cannot start: ${this.failedStarts} in a row failed before their first answer (the last: ${error.message})`,
      {},
      { cause: error },
    );
    for (const queued of this.queue.splice(0)) queued.reject(this.broken);
    for (const [other, running] of this.running) {
      this.running.delete(other);
      running.reject(this.broken);
    }
    this.idle.length = 0;
    void Promise.all(this.all.splice(0).map((other) => other.terminate())).catch(() => undefined);
  }
}
