/**
 * The basics of direct I/O (O_DIRECT) that a thread without the piece layer's buffer bookkeeping
 * needs too: the flag, the alignment, the kernel's refusal, a buffer aligned by its address, and a
 * positioned write that sends a range's aligned head past the page cache and the rest through it.
 * The piece layer's own direct I/O (src/piece/direct-io.ts) builds on these; the hash workers' local
 * copies (src/manifest/hash-worker.ts) use them as they are.
 */

import { closeSync, constants, openSync, writeSync } from 'node:fs';
import { WeightcastError } from '../errors.js';
import { nativeHelper } from './native-helper.js';

/** The flag to open a file for direct I/O, or undefined where the platform has none. */
export const O_DIRECT: number | undefined = (constants as { O_DIRECT?: number }).O_DIRECT;

/** Offsets and lengths that go direct are multiples of this (the largest common logical block size). */
export const DIRECT_ALIGNMENT = 4096;

/** Whether an error is the kernel refusing a direct transfer (alignment, or no O_DIRECT there). */
export function isDirectRefusal(error: unknown): boolean {
  return (error as NodeJS.ErrnoException | undefined)?.code === 'EINVAL';
}

/**
 * A buffer of `length` bytes whose first byte is DIRECT_ALIGNMENT-aligned, found from its address
 * by the native helper; undefined without the helper (or without O_DIRECT on this platform).
 */
export function addressAlignedBuffer(length: number): Buffer | undefined {
  if (O_DIRECT === undefined) return undefined;
  const padded = Buffer.allocUnsafeSlow(length + DIRECT_ALIGNMENT);
  const start = addressAlignedStart(padded);
  return start === undefined ? undefined : padded.subarray(start, start + length);
}

/** The offset in `buffer` of its first DIRECT_ALIGNMENT-aligned byte, from its address (native helper). */
export function addressAlignedStart(buffer: Uint8Array): number | undefined {
  const modulo = nativeHelper()?.addressModulo?.(buffer, DIRECT_ALIGNMENT);
  return modulo === undefined || modulo < 0 ? undefined : (DIRECT_ALIGNMENT - modulo) % DIRECT_ALIGNMENT;
}

/**
 * Writes bytes [from, to) of `bytes` at `position + from` of `fd` with positioned writes until all
 * are written, or, with `whileAligned`, until a short write leaves an unaligned remainder. A write
 * that makes no progress is an IO error, never a loop. Returns how far it got.
 */
export function writeAllSync(
  fd: number,
  bytes: Uint8Array,
  from: number,
  to: number,
  position: number,
  whileAligned = false,
): number {
  let done = from;
  while (done < to && (!whileAligned || done % DIRECT_ALIGNMENT === 0)) {
    const written = writeSync(fd, bytes, done, to - done, position + done);
    if (written <= 0) throw new WeightcastError('IO', 'write made no progress');
    done += written;
  }
  return done;
}

/** How a range went to disk: bytes past the page cache, and whether the kernel refused direct I/O. */
export interface DirectWriteResult {
  directBytes: number;
  refused: boolean;
}

/**
 * Writes `bytes` at `position` of the file at `path` (which exists). With `direct` (the buffer from
 * addressAlignedBuffer, the position aligned), the range's whole blocks go with O_DIRECT and the
 * rest, a file's last partial block, through the page cache; a direct write the kernel refuses is
 * done buffered instead (`refused`). Without `direct` everything is buffered.
 */
export function writeRangeSync(
  path: string,
  bytes: Uint8Array,
  position: number,
  direct: boolean,
): DirectWriteResult {
  let done = 0;
  let refused = false;
  const head = bytes.length - (bytes.length % DIRECT_ALIGNMENT);
  if (direct && O_DIRECT !== undefined && head > 0 && position % DIRECT_ALIGNMENT === 0) {
    try {
      const fd = openSync(path, constants.O_WRONLY | O_DIRECT);
      try {
        // A short direct write leaves an aligned remainder only by chance: the rest then goes buffered.
        done = writeAllSync(fd, bytes, 0, head, position, true);
      } finally {
        closeSync(fd);
      }
    } catch (error) {
      if (!isDirectRefusal(error)) throw error;
      refused = true;
    }
  }
  const directBytes = done;
  if (done < bytes.length) {
    const fd = openSync(path, 'r+');
    try {
      writeAllSync(fd, bytes, done, bytes.length, position);
    } finally {
      closeSync(fd);
    }
  }
  return { directBytes, refused };
}
