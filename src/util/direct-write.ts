/**
 * The basics of direct I/O (O_DIRECT) that a thread without the piece layer's buffer bookkeeping
 * needs too: the flag, the alignment, the kernel's refusal, a buffer aligned by its address, and a
 * positioned write that sends a range's aligned head past the page cache and the rest through it.
 * The piece layer's own direct I/O (src/piece/direct-io.ts) builds on these; the hash workers' local
 * copies (src/manifest/hash-worker.ts) use them as they are.
 */

import { closeSync, constants, openSync, writeSync } from 'node:fs';
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
  const modulo = nativeHelper()?.addressModulo?.(padded, DIRECT_ALIGNMENT);
  if (modulo === undefined || modulo < 0) return undefined;
  const start = (DIRECT_ALIGNMENT - modulo) % DIRECT_ALIGNMENT;
  return padded.subarray(start, start + length);
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
        while (done < head && done % DIRECT_ALIGNMENT === 0) {
          done += writeSync(fd, bytes, done, head - done, position + done);
        }
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
      while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done, position + done);
    } finally {
      closeSync(fd);
    }
  }
  return { directBytes, refused };
}
