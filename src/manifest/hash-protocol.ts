/** Messages between the hash pool and its worker threads. */

export type HashRequest =
  | {
      id: number;
      kind: 'pieces';
      path: string;
      /** Start of the first piece; the range is split into pieces of pieceSize (the last may be short). */
      offset: number;
      length: number;
      pieceSize: number;
      /** Hash the range as one stream too (only meaningful when it is the whole file). */
      wholeFile: boolean;
      /** Compute the per-piece digests (false for a whole-file-only job). */
      pieces: boolean;
    }
  | { id: number; kind: 'buffer'; buffer: ArrayBuffer; offset: number; length: number }
  | {
      id: number;
      kind: 'copy';
      /** Read [offset, offset + length) of `source`, hash it, and write it at the same offset of `dest`. */
      source: string;
      dest: string;
      offset: number;
      length: number;
      /** The digest the bytes must have to be written; undefined writes whatever was read. */
      expected: string | undefined;
      /** Write the range's whole blocks with O_DIRECT, past the page cache (util/direct-write.ts). */
      direct?: boolean;
    };

export interface HashResponse {
  id: number;
  ok: boolean;
  digests?: string[];
  fileSha256?: string;
  /** Copy jobs: whether the bytes matched and were written. */
  written?: boolean;
  /** Copy jobs: bytes written with O_DIRECT, and whether the kernel refused a direct write. */
  directBytes?: number;
  directRefused?: boolean;
  /** A transferred buffer comes back to its owner, so pools of buffers stay bounded. */
  buffer?: ArrayBuffer;
  error?: string;
}
