/**
 * Direct I/O for piece bytes: verified pieces written with O_DIRECT go from the piece buffer to the
 * disk without a copy into the page cache, and pieces served to peers are read back the same way.
 *
 * Why: a buffered write copies every byte into page-cache pages and leaves them dirty for the
 * kernel's writeback. Measured on the development VM (1 GiB in 512 KiB pieces from one reused
 * buffer, `node` with `process.cpuUsage`): 1.9-2.4 kernel CPU-s buffered (the copy into pages the
 * VM had not touched yet is most of it), 0.12 with O_DIRECT, and 3.5 times faster. A host that
 * writes a multi-GiB model as fast as its NIC delivers it also keeps the page cache (and the
 * writeback throttling of dirty pages) out of the way of the job waiting for the weights.
 *
 * O_DIRECT wants the buffer's address, the file offset and the length aligned to the device's
 * logical block size. Offsets and lengths of pieces are multiples of the piece size, except a file's
 * last piece; a buffer's address cannot be read from JavaScript, so `pieceBuffer` allocates a block
 * more than asked and finds the aligned start by trying direct writes of one block at each 16-byte
 * step into a probe file (unlinked at once; the kernel refuses a misaligned one with EINVAL before
 * any I/O). Buffers made that way are remembered; `directEligible` tells whether a view of one may
 * go to disk directly. Anything else (a file's last piece, a buffer from elsewhere, a file system
 * without O_DIRECT, such as an older tmpfs) takes the ordinary buffered path, and a direct write or
 * read that the kernel refuses with EINVAL is done buffered and turns direct I/O off for that file.
 *
 * Where the native helper is built (native/buffer-address.c), it reads a buffer's address instead
 * and no buffer is probed; only enableDirectIo's first probe runs, to learn whether the file system
 * takes O_DIRECT at all. A probe costs an open, a direct write to disk and up to 255 refused ones:
 * on the development VM ~0.5 CPU-ms and 1-2 ms of a blocked thread per buffer, 2 and 4 ms for 64 KiB
 * buffers (whose starts malloc varies most), and an agent that keeps a few hundred small pieces in
 * memory for its uploads makes that many buffers.
 */

import { closeSync, constants, openSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { DIRECT_ALIGNMENT, O_DIRECT, addressAlignedStart, isDirectRefusal } from '../util/direct-write.js';

export { DIRECT_ALIGNMENT, O_DIRECT, isDirectRefusal };
/** malloc's alignment: the steps at which an aligned start is looked for. */
const ADDRESS_STEP = 16;

/** For each buffer made here: the byte offset in its memory where an aligned view starts. */
const alignedStarts = new WeakMap<ArrayBufferLike, number>();

interface Probe {
  /** Where probe files are made (and unlinked at once): on the file system the pieces go to. */
  dir: string;
  /** Where the last buffer's aligned start was: allocations of one size tend to repeat it. */
  lastStart: number;
}

/** Probe files made by this process (each a few system calls and a direct write), for tests. */
let probes = 0;

/** How many alignment probes this process has run (enableDirectIo's, and pieceBuffer's without the native helper). */
export function directIoProbes(): number {
  return probes;
}

/** undefined: not tried yet; null: this process cannot use direct I/O (see enableDirectIo). */
let probe: Probe | null | undefined;

/**
 * Turns direct I/O on for this process, probing alignment against a file in `dir` (a directory on
 * the file system the pieces go to; later buffers are probed there). Returns whether it is on: off
 * where `dir` refuses O_DIRECT, until a call with another directory turns it on again. Buffers made
 * before stay as they are (a misaligned one only costs a refused transfer, done buffered).
 */
export function enableDirectIo(dir: string): boolean {
  if (O_DIRECT === undefined) return false;
  probe = { dir, lastStart: probe?.lastStart ?? 0 };
  if (alignedStart(Buffer.allocUnsafeSlow(2 * DIRECT_ALIGNMENT)) === undefined) probe = null;
  return probe !== null;
}

/**
 * `to` is `from` transferred to a worker and back: the same memory under a new object, so an aligned
 * start `from` had holds for `to`.
 */
export function carryAlignment(from: ArrayBufferLike, to: ArrayBufferLike): void {
  const start = alignedStarts.get(from);
  if (start !== undefined) alignedStarts.set(to, start);
}

/**
 * A buffer of `length` bytes for piece I/O: aligned for direct I/O when it is on (see above), a
 * plain one otherwise. Costs a probe of a few system calls, so pool these buffers.
 */
export function pieceBuffer(length: number): Buffer {
  if (probe === undefined || probe === null) return Buffer.allocUnsafeSlow(length);
  const padded = Buffer.allocUnsafeSlow(length + DIRECT_ALIGNMENT);
  const start = addressAlignedStart(padded) ?? alignedStart(padded);
  if (start === undefined) return padded.subarray(0, length);
  alignedStarts.set(padded.buffer, padded.byteOffset + start);
  return padded.subarray(start, start + length);
}

/** Whether `view` at file offset `position` may be written or read with O_DIRECT. */
export function directEligible(view: Uint8Array, position: number): boolean {
  const start = alignedStarts.get(view.buffer);
  return (
    start !== undefined &&
    (view.byteOffset - start) % DIRECT_ALIGNMENT === 0 &&
    view.length % DIRECT_ALIGNMENT === 0 &&
    view.length > 0 &&
    position % DIRECT_ALIGNMENT === 0
  );
}

/**
 * The offset in `buffer` (of at least two blocks) where a direct write succeeds, if any. The probe
 * file is open only for this (an fd held for the process's life would keep its file system busy).
 */
function alignedStart(buffer: Buffer): number | undefined {
  const current = probe;
  if (current === undefined || current === null || O_DIRECT === undefined) return undefined;
  const path = join(current.dir, `.direct-io-probe-${process.pid}`);
  probes++;
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC | O_DIRECT, 0o600);
  } catch {
    return undefined;
  }
  // Each refused write throws: without a stack to capture, an error costs a fraction as much.
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    unlinkSync(path);
    const candidates = DIRECT_ALIGNMENT / ADDRESS_STEP;
    for (let i = 0; i < candidates; i++) {
      const start = (current.lastStart + i * ADDRESS_STEP) % DIRECT_ALIGNMENT;
      try {
        writeSync(fd, buffer, start, DIRECT_ALIGNMENT, 0);
      } catch (error) {
        if (isDirectRefusal(error)) continue;
        return undefined;
      }
      current.lastStart = start;
      return start;
    }
    return undefined;
  } catch {
    return undefined;
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
    closeSync(fd);
  }
}
