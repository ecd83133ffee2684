/**
 * Transfer units: what the scheduler hands out. A manifest's piece is the unit of verification and
 * of resumption; the swarm's unit of work may be larger. A unit is a run of consecutive pieces of
 * one file (never across files, so its bytes are one range of one file), and the core schedules
 * units as it would pieces. An assignment names the unit's first piece and its piece count; the agent
 * fetches the unit's missing pieces as one range and verifies and stores each piece on its own.
 *
 * Why: every transfer costs the same fixed work wherever it goes (an assignment, an ending notice
 * and a report on the sync channel, the core's planning, a request and a response head, a fetch's
 * bookkeeping). On the netns fan-out (8 x 200 Mbit/s, 256 MiB in 512 KiB pieces) units of 2 pieces
 * cut the swarm's user CPU by a fifth at the same T_last. The price is the tail: a unit is relayed
 * only once it is whole, so the last units take twice as long per hop; at 8 x 100 Mbit/s that made
 * T_last 1-3 s longer with 259 units. So by default a model is grouped only where it keeps at least
 * UNITS_MIN units (manifests cut into many small pieces), where the tail is a small share of the
 * run; `--transfer-unit N` sets the grouping for a swarm.
 *
 * Pure: no I/O; the scheduler builds one per swarm from its piece map.
 */

import type { PieceMap } from '../../piece/piece-map.js';
import { ASSIGNMENT_BYTES_MAX, ASSIGNMENT_PIECES_MAX } from '../wire/protocol.js';

/** The smallest transfer the scheduler aims for, unless told otherwise. */
export const TRANSFER_UNIT_BYTES_DEFAULT = 1024 * 1024;
/** Pieces are grouped only while the model keeps at least this many units. */
export const UNITS_MIN = 1024;

/** How many pieces make one unit for a model of `pieceCount` pieces of `pieceSize` bytes. */
export function unitPiecesFor(pieceSize: number, pieceCount: number, unitBytes: number): number {
  if (!(unitBytes > pieceSize) || pieceSize <= 0) return 1;
  const wanted = Math.ceil(unitBytes / pieceSize);
  const spread = Math.floor(pieceCount / UNITS_MIN);
  return Math.max(1, Math.min(wanted, spread));
}

export class TransferUnits {
  /** Units in the model. */
  readonly count: number;
  /** Pieces per unit (a file's last unit may have fewer). */
  readonly unitPieces: number;
  /** The largest unit's bytes. */
  readonly unitBytes: number;
  /** first[u] = the global index of unit u's first piece; first[count] = the piece count. */
  private readonly first: Int32Array;
  /** unitOf[piece] = the unit holding it. */
  private readonly unitOfPiece: Int32Array;
  private readonly bytes: Float64Array;

  constructor(
    readonly map: PieceMap,
    unitPieces: number,
  ) {
    // Peers serve a multi-piece range of at most ASSIGNMENT_BYTES_MAX (their upload buffers are that big).
    const fits = Math.floor(ASSIGNMENT_BYTES_MAX / Math.max(1, map.pieceSize));
    this.unitPieces = Math.max(1, Math.min(ASSIGNMENT_PIECES_MAX, fits, Math.floor(unitPieces)));
    const starts: number[] = [];
    this.unitOfPiece = new Int32Array(map.pieceCount);
    map.manifest.files.forEach((file, fileIndex) => {
      for (let piece = 0; piece < file.pieces.length; piece += this.unitPieces) {
        const global = map.globalIndex(fileIndex, piece);
        const end = Math.min(file.pieces.length, piece + this.unitPieces);
        for (let p = piece; p < end; p++) this.unitOfPiece[global + (p - piece)] = starts.length;
        starts.push(global);
      }
    });
    this.count = starts.length;
    this.first = new Int32Array(this.count + 1);
    starts.forEach((start, unit) => (this.first[unit] = start));
    this.first[this.count] = map.pieceCount;
    this.bytes = new Float64Array(this.count);
    let largest = 0;
    for (let unit = 0; unit < this.count; unit++) {
      let bytes = 0;
      for (let piece = this.firstPiece(unit); piece < this.endPiece(unit); piece++)
        bytes += map.pieceLength(piece);
      this.bytes[unit] = bytes;
      largest = Math.max(largest, bytes);
    }
    this.unitBytes = largest;
  }

  /** The global index of the unit's first piece. */
  firstPiece(unit: number): number {
    return this.first[unit] ?? 0;
  }

  /** One past the unit's last piece. */
  endPiece(unit: number): number {
    return this.first[unit + 1] ?? 0;
  }

  /** Pieces in the unit. */
  pieces(unit: number): number {
    return this.endPiece(unit) - this.firstPiece(unit);
  }

  /** The unit's bytes (the sum of its pieces' lengths). */
  length(unit: number): number {
    return this.bytes[unit] ?? 0;
  }

  unitOf(piece: number): number {
    return this.unitOfPiece[piece] ?? -1;
  }

  /** The units all of whose pieces are in `pieces` (global piece indices, any order, no repeats). */
  unitsHeld(pieces: Iterable<number>): number[] {
    const counts = new Int32Array(this.count);
    const held: number[] = [];
    for (const piece of pieces) {
      const unit = this.unitOf(piece);
      if (unit < 0) continue;
      counts[unit] = (counts[unit] ?? 0) + 1;
      if (counts[unit] === this.pieces(unit)) held.push(unit);
    }
    return held;
  }
}
