/**
 * A pool of worker threads that compute SHA-256, so hashing uses every core while the main thread
 * keeps doing I/O. Two kinds of job: hash pieces of a local file (the worker reads them itself, so
 * each byte crosses no thread boundary), and hash a buffer the caller transfers in and gets back.
 * Jobs queue when all workers are busy; the queue is bounded by the callers' own concurrency.
 */

import { availableParallelism } from 'node:os';
import { WeightcastError } from '../errors.js';
import { WorkerPool } from '../util/worker-pool.js';
import type { HashRequest, HashResponse } from './hash-protocol.js';

type RequestBody = HashRequest extends infer R ? (R extends HashRequest ? Omit<R, 'id'> : never) : never;

export class HashPool {
  private readonly pool: WorkerPool<HashRequest, HashResponse>;
  private nextId = 1;

  constructor(threads: number = availableParallelism()) {
    this.pool = new WorkerPool(new URL('./hash-worker.js', import.meta.url), threads, 'hash pool');
  }

  get threads(): number {
    return this.pool.threads;
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
   * With `direct`, the range's whole blocks are written with O_DIRECT where the worker can align
   * its buffer (the native helper) and the kernel takes it; `directBytes` says how many were.
   */
  async copyPiece(
    source: string,
    dest: string,
    offset: number,
    length: number,
    expected: string | undefined,
    signal?: AbortSignal,
    direct = false,
  ): Promise<{ digest: string; written: boolean; directBytes: number; directRefused: boolean }> {
    const response = await this.submit(
      { kind: 'copy', source, dest, offset, length, expected, direct },
      signal,
    );
    if (!response.ok) {
      throw new WeightcastError('IO', `copying ${source} failed: ${response.error ?? 'unknown error'}`, {
        file: source,
      });
    }
    return {
      digest: response.digests?.[0] ?? '',
      written: response.written === true,
      directBytes: response.directBytes ?? 0,
      directRefused: response.directRefused === true,
    };
  }

  /**
   * SHA-256 of `length` bytes of `buffer` from `offset`. The buffer is transferred to a worker and
   * back (the same memory): the caller must use the returned buffer, the one passed in is detached
   * meanwhile.
   */
  async hashBuffer(
    buffer: ArrayBuffer,
    length: number,
    signal?: AbortSignal,
    offset = 0,
  ): Promise<{ digest: string; buffer: ArrayBuffer }> {
    const response = await this.submit({ kind: 'buffer', buffer, offset, length }, signal);
    if (response.buffer === undefined) throw new Error('hash worker did not return the buffer');
    if (!response.ok)
      throw new WeightcastError('IO', `hashing a buffer failed: ${response.error ?? 'unknown'}`);
    return { digest: response.digests?.[0] ?? '', buffer: response.buffer };
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  private submit(body: RequestBody, signal: AbortSignal | undefined): Promise<HashResponse> {
    const request: HashRequest = { ...body, id: this.nextId++ };
    const transfer = request.kind === 'buffer' ? [request.buffer] : [];
    return this.pool.run(request, { transfer, signal });
  }
}
