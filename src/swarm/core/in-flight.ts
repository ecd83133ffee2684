/**
 * Pieces in flight to each host: a short row of piece numbers per host (one entry per transfer, so
 * a hedged piece appears twice), `width` entries wide, the host's download limit. A host has only a
 * few transfers, so "is this piece in flight to that host" reads one cache line where a bitfield
 * would touch a random word of 12.5 KB; the hot paths ask it for every piece they consider.
 */

import { assert } from '../../errors.js';

const EMPTY = -1;

export class InFlightPieces {
  readonly width: number;
  private pieces = new Int32Array(0);
  /** Distinct pieces in flight per host. */
  private distinct = new Int32Array(0);

  constructor(width: number) {
    this.width = width;
  }

  ensureHosts(hostCount: number): void {
    if (hostCount <= this.distinct.length) return;
    const size = Math.max(hostCount, this.distinct.length * 2);
    const pieces = new Int32Array(size * this.width).fill(EMPTY);
    pieces.set(this.pieces);
    this.pieces = pieces;
    const distinct = new Int32Array(size);
    distinct.set(this.distinct);
    this.distinct = distinct;
  }

  /** Distinct pieces in flight to `host`. */
  distinctCount(host: number): number {
    return this.distinct[host]!;
  }

  has(host: number, piece: number): boolean {
    return this.count(host, piece) > 0;
  }

  /** Transfers of `piece` in flight to `host`. */
  count(host: number, piece: number): number {
    const base = host * this.width;
    let count = 0;
    for (let i = 0; i < this.width; i++) if (this.pieces[base + i] === piece) count++;
    return count;
  }

  add(host: number, piece: number): void {
    const base = host * this.width;
    let free = EMPTY;
    let already = false;
    for (let i = 0; i < this.width; i++) {
      const entry = this.pieces[base + i]!;
      if (entry === piece) already = true;
      else if (entry === EMPTY && free === EMPTY) free = base + i;
    }
    if (free === EMPTY) assert(false, `host ${host} has more than ${this.width} transfers in flight`);
    this.pieces[free] = piece;
    if (!already) this.distinct[host]!++;
  }

  remove(host: number, piece: number): void {
    const base = host * this.width;
    let removed = false;
    let remaining = false;
    for (let i = 0; i < this.width; i++) {
      if (this.pieces[base + i] !== piece) continue;
      if (removed) remaining = true;
      else {
        this.pieces[base + i] = EMPTY;
        removed = true;
      }
    }
    if (!removed) assert(false, `piece ${piece} was not in flight to host ${host}`);
    if (!remaining) this.distinct[host]!--;
  }

  clearHost(host: number): void {
    this.pieces.fill(EMPTY, host * this.width, (host + 1) * this.width);
    this.distinct[host] = 0;
  }
}
