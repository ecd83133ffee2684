/**
 * Worker thread body for the hash pool: reads byte ranges of local files with positioned reads into
 * one reused buffer and hashes them, hashes a buffer handed over by transfer and hands it back, or
 * copies a piece between local files, writing it only when its digest matches. Hashing jobs hold
 * at most CHUNK_BYTES of file data at a time; a copy job holds one piece.
 */

import { createHash, type Hash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { addressAlignedBuffer, writeRangeSync } from '../util/direct-write.js';
import type { HashRequest, HashResponse } from './hash-protocol.js';

const CHUNK_BYTES = 1024 * 1024;
const chunk = Buffer.allocUnsafe(CHUNK_BYTES);

/** Reads [offset, offset + length) of fd, feeding every byte to each hash in `sinks`. */
function feedRange(fd: number, offset: number, length: number, sinks: Hash[]): void {
  let done = 0;
  while (done < length) {
    const want = Math.min(CHUNK_BYTES, length - done);
    const got = readSync(fd, chunk, 0, want, offset + done);
    if (got === 0) throw new Error(`file ended at byte ${offset + done}, expected ${offset + length}`);
    const view = chunk.subarray(0, got);
    for (const sink of sinks) sink.update(view);
    done += got;
  }
}

function hashPieces(request: Extract<HashRequest, { kind: 'pieces' }>): HashResponse {
  const fd = openSync(request.path, 'r');
  try {
    const whole = request.wholeFile ? createHash('sha256') : undefined;
    const digests: string[] = [];
    let offset = request.offset;
    const end = request.offset + request.length;
    while (offset < end) {
      const pieceLength = Math.min(request.pieceSize, end - offset);
      const piece = request.pieces ? createHash('sha256') : undefined;
      const sinks = [piece, whole].filter((hash): hash is Hash => hash !== undefined);
      feedRange(fd, offset, pieceLength, sinks);
      if (piece !== undefined) digests.push(piece.digest('hex'));
      offset += pieceLength;
    }
    const response: HashResponse = { id: request.id, ok: true, digests };
    if (whole !== undefined) response.fileSha256 = whole.digest('hex');
    return response;
  } finally {
    closeSync(fd);
  }
}

let pieceBuffer: Buffer = Buffer.alloc(0);
/** Whether `pieceBuffer` is aligned for direct I/O (addressAlignedBuffer). */
let pieceBufferAligned = false;
/** This thread cannot align a buffer by its address (no native helper): copies go buffered. */
let alignmentUnavailable = false;

/** The copy buffer, at least `length` bytes, aligned for direct I/O when `direct` and possible. */
function copyBuffer(length: number, direct: boolean): Buffer {
  const wantsAligned = direct && !alignmentUnavailable;
  if (pieceBuffer.length >= length && (pieceBufferAligned || !wantsAligned)) return pieceBuffer;
  const size = Math.max(length, pieceBuffer.length);
  const aligned = wantsAligned ? addressAlignedBuffer(size) : undefined;
  if (wantsAligned && aligned === undefined) alignmentUnavailable = true;
  pieceBuffer = aligned ?? Buffer.allocUnsafe(size);
  pieceBufferAligned = aligned !== undefined;
  return pieceBuffer;
}

/**
 * Reads a piece (hashing each chunk while it is still in cache), then writes it if it verifies:
 * with `direct`, its whole blocks past the page cache (a buffered copy of 1 GiB cost this VM 4-5 s
 * of kernel time, mostly filling page-cache pages).
 */
function copyPiece(request: Extract<HashRequest, { kind: 'copy' }>): HashResponse {
  const buffer = copyBuffer(request.length, request.direct === true);
  const hash = createHash('sha256');
  const source = openSync(request.source, 'r');
  try {
    let done = 0;
    while (done < request.length) {
      const want = Math.min(CHUNK_BYTES, request.length - done);
      const got = readSync(source, buffer, done, want, request.offset + done);
      if (got === 0) throw new Error(`${request.source} ended at byte ${request.offset + done}`);
      hash.update(buffer.subarray(done, done + got));
      done += got;
    }
  } finally {
    closeSync(source);
  }
  const digest = hash.digest('hex');
  const written = request.expected === undefined || request.expected === digest;
  if (!written) return { id: request.id, ok: true, digests: [digest], written, directBytes: 0 };
  const { directBytes, refused } = writeRangeSync(
    request.dest,
    buffer.subarray(0, request.length),
    request.offset,
    request.direct === true && pieceBufferAligned,
  );
  return { id: request.id, ok: true, digests: [digest], written, directBytes, directRefused: refused };
}

function handle(request: HashRequest): { response: HashResponse; transfer: ArrayBuffer[] } {
  if (request.kind === 'pieces') return { response: hashPieces(request), transfer: [] };
  if (request.kind === 'copy') return { response: copyPiece(request), transfer: [] };
  const view = new Uint8Array(request.buffer, request.offset, request.length);
  const digest = createHash('sha256').update(view).digest('hex');
  return {
    response: { id: request.id, ok: true, digests: [digest], buffer: request.buffer },
    transfer: [request.buffer],
  };
}

parentPort?.on('message', (request: HashRequest) => {
  try {
    const { response, transfer } = handle(request);
    parentPort?.postMessage(response, transfer);
  } catch (error) {
    const buffer = request.kind === 'buffer' ? request.buffer : undefined;
    const response: HashResponse = { id: request.id, ok: false, error: (error as Error).message };
    if (buffer !== undefined) response.buffer = buffer;
    parentPort?.postMessage(response, buffer === undefined ? [] : [buffer]);
  }
});
