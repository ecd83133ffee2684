/**
 * The swarm numbers pieces across a whole model: global piece `g` is piece `g - first[f]` of file `f`,
 * files in manifest order. The core, the wire protocol and the bitfields all speak global indices;
 * this map turns them back into a file, a byte range and the digest that must match.
 */

import type { Manifest, ManifestFile } from '../manifest/manifest.js';

export interface PieceLocation {
  fileIndex: number;
  file: ManifestFile;
  /** Piece index inside the file. */
  piece: number;
  /** Byte offset of the piece inside the file. */
  offset: number;
  length: number;
  digest: string;
}

export class PieceMap {
  readonly pieceCount: number;
  readonly pieceSize: number;
  readonly totalBytes: number;
  /** first[f] = global index of file f's piece 0; first[files] = pieceCount. */
  private readonly first: Int32Array | Float64Array;

  constructor(readonly manifest: Manifest) {
    this.pieceSize = manifest.pieceSize;
    this.first = new Float64Array(manifest.files.length + 1);
    let count = 0;
    let bytes = 0;
    manifest.files.forEach((file, index) => {
      this.first[index] = count;
      count += file.pieces.length;
      bytes += file.size;
    });
    this.first[manifest.files.length] = count;
    this.pieceCount = count;
    this.totalBytes = bytes;
  }

  /** Global index of piece `piece` of file `fileIndex`. */
  globalIndex(fileIndex: number, piece: number): number {
    return (this.first[fileIndex] ?? 0) + piece;
  }

  locate(global: number): PieceLocation {
    if (!Number.isInteger(global) || global < 0 || global >= this.pieceCount) {
      throw new RangeError(`piece ${global} is outside 0..${this.pieceCount - 1}`);
    }
    // Binary search for the last file whose first piece is <= global (empty files have no pieces).
    let lo = 0;
    let hi = this.manifest.files.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((this.first[mid] ?? 0) <= global) lo = mid;
      else hi = mid - 1;
    }
    const file = this.manifest.files[lo] as ManifestFile;
    const piece = global - (this.first[lo] ?? 0);
    const offset = piece * this.pieceSize;
    return {
      fileIndex: lo,
      file,
      piece,
      offset,
      length: Math.min(this.pieceSize, file.size - offset),
      digest: file.pieces[piece] as string,
    };
  }

  pieceLength(global: number): number {
    return this.locate(global).length;
  }

  /** Global pieces covering [start, end) of file `fileIndex`. */
  piecesOfRange(fileIndex: number, start: number, end: number): number[] {
    const file = this.manifest.files[fileIndex];
    if (file === undefined || end <= start) return [];
    const firstPiece = Math.floor(start / this.pieceSize);
    const lastPiece = Math.ceil(Math.min(end, file.size) / this.pieceSize);
    const out: number[] = [];
    for (let p = firstPiece; p < lastPiece; p++) out.push(this.globalIndex(fileIndex, p));
    return out;
  }
}
