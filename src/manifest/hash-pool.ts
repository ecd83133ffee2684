/**
 * A pool of worker threads that compute SHA-256, so hashing uses every core while the main thread
 * keeps doing I/O. Two kinds of job: hash pieces of a local file (the worker reads them itself, so
 * each byte crosses no thread boundary), and hash a buffer the caller transfers in and gets back.
 * Jobs queue when all workers are busy; the queue is bounded by the callers' own concurrency.
 */

import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { WeightcastError, abortError } from '../errors.js';
import type { HashRequest, HashResponse } from './hash-protocol.js';

type RequestBody = HashRequest extends infer R ? (R extends HashRequest ? Omit<R, 'id'> : never) : never;

interface Pending {
  request: HashRequest;
  signal: AbortSignal | undefined;
  resolve: (response: HashResponse) => void;
  reject: (error: Error) => void;
}

export class HashPool {
  private readonly idle: Worker[] = [];
  private readonly all: Worker[] = [];
  private readonly queue: Pending[] = [];
  private readonly running = new Map<Worker, Pending>();
  private nextId = 1;
  private closed = false;

  constructor(threads: number = availableParallelism()) {
    for (let i = 0; i < Math.max(1, threads); i++) this.idle.push(this.spawn());
  }

  private spawn(): Worker {
    const worker = new Worker(new URL('./hash-worker.js', import.meta.url));
    worker.on('message', (response: HashResponse) => this.finish(worker, response));
    worker.on('error', (error) => this.fail(worker, error));
    worker.unref();
    this.all.push(worker);
    return worker;
  }

  get threads(): number {
    return this.all.length;
  }

  /** SHA-256 of each piece of [offset, offset + length) of a local file; optionally of the whole range. */
  async hashFileRange(
    path: string,
    offset: number,
    length: number,
    pieceSize: number,
    options: { wholeFile?: boolean; pieces?: boolean; signal?: AbortSignal } = {},
  ): Promise<{ digests: string[]; fileSha256?: string }> {
    const response = await this.submit(
      {
        kind: 'pieces',
        path,
        offset,
        length,
        pieceSize,
        wholeFile: options.wholeFile === true,
        pieces: options.pieces !== false,
      },
      options.signal,
    );
    if (!response.ok) {
      throw new WeightcastError('IO', `hashing ${path} failed: ${response.error ?? 'unknown error'}`, {
        file: path,
      });
    }
    const out: { digests: string[]; fileSha256?: string } = { digests: response.digests ?? [] };
    if (response.fileSha256 !== undefined) out.fileSha256 = response.fileSha256;
    return out;
  }

  /**
   * Copies [offset, offset + length) from a local `source` file to the same range of `dest` (which
   * must exist), on a worker: read once, hashed while in cache, written only when the digest equals
   * `expected` (or always when `expected` is undefined). The main thread never touches the bytes.
   */
  async copyPiece(
    source: string,
    dest: string,
    offset: number,
    length: number,
    expected: string | undefined,
    signal?: AbortSignal,
  ): Promise<{ digest: string; written: boolean }> {
    const response = await this.submit({ kind: 'copy', source, dest, offset, length, expected }, signal);
    if (!response.ok) {
      throw new WeightcastError('IO', `copying ${source} failed: ${response.error ?? 'unknown error'}`, {
        file: source,
      });
    }
    return { digest: response.digests?.[0] ?? '', written: response.written === true };
  }

  /**
   * SHA-256 of the first `length` bytes of `buffer`. The buffer is transferred to a worker and back:
   * the caller must use the returned buffer, the one passed in is detached meanwhile.
   */
  async hashBuffer(
    buffer: ArrayBuffer,
    length: number,
    signal?: AbortSignal,
  ): Promise<{ digest: string; buffer: ArrayBuffer }> {
    const response = await this.submit({ kind: 'buffer', buffer, length }, signal);
    if (response.buffer === undefined) throw new Error('hash worker did not return the buffer');
    if (!response.ok)
      throw new WeightcastError('IO', `hashing a buffer failed: ${response.error ?? 'unknown'}`);
    return { digest: response.digests?.[0] ?? '', buffer: response.buffer };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.splice(0))
      pending.reject(new WeightcastError('ABORTED', 'hash pool closed'));
    await Promise.all(this.all.map((worker) => worker.terminate()));
  }

  private submit(body: RequestBody, signal: AbortSignal | undefined): Promise<HashResponse> {
    if (this.closed) return Promise.reject(new WeightcastError('ABORTED', 'hash pool closed'));
    if (signal?.aborted === true) return Promise.reject(abortError(signal, 'hashing'));
    const request: HashRequest = { ...body, id: this.nextId++ };
    // No abort listener per job: a queued job is dropped when it reaches the front of the queue
    // after an abort, and a running one finishes (jobs are bounded in size) and is ignored.
    return new Promise<HashResponse>((resolve, reject) => {
      this.queue.push({ request, resolve, reject, signal });
      this.pump();
    });
  }

  private pump(): void {
    while (this.idle.length > 0 && this.queue.length > 0) {
      const worker = this.idle.pop() as Worker;
      const pending = this.queue.shift() as Pending;
      if (pending.signal?.aborted === true) {
        this.idle.push(worker);
        pending.reject(abortError(pending.signal, 'hashing'));
        continue;
      }
      this.running.set(worker, pending);
      worker.ref();
      const transfer = pending.request.kind === 'buffer' ? [pending.request.buffer] : [];
      worker.postMessage(pending.request, transfer);
    }
  }

  private finish(worker: Worker, response: HashResponse): void {
    const pending = this.running.get(worker);
    this.running.delete(worker);
    worker.unref();
    this.idle.push(worker);
    if (pending?.signal?.aborted === true) pending.reject(abortError(pending.signal, 'hashing'));
    else pending?.resolve(response);
    this.pump();
  }

  /** A worker that crashed takes its job down with it; a fresh worker takes its place. */
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
