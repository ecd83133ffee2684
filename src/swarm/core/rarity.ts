/**
 * The global rarity index: how many hosts hold each piece (seeds included, the origin not), with
 * the pieces kept in one array sorted by that count. Bucket `c` (every piece held by exactly `c`
 * hosts) is the slice `order[bucketStart[c] .. bucketStart[c + 1])`. A copy gained or lost moves one
 * piece to its bucket's edge with a single swap and shifts one boundary: O(1), no allocation.
 *
 * Readers walk `order` from a bucket's start to find rare pieces; the initial order is a seeded
 * shuffle and every reader starts each bucket at a random offset, so ties never follow file order.
 */

import { assert } from '../../errors.js';
import type { Random } from './random.js';

export class RarityIndex {
  readonly pieceCount: number;
  /** Copies of each piece among hosts that may serve it. */
  readonly count: Int32Array;
  /** Pieces sorted by copy count; `position` is its inverse. */
  readonly order: Int32Array;
  private readonly position: Int32Array;
  /** `bucketStart[c]` is where the pieces with `c` copies begin; one past the last bucket is `pieceCount`. */
  private readonly bucketStart: Int32Array;
  private readonly countMax: number;

  constructor(pieceCount: number, countMax: number, random: Random) {
    this.pieceCount = pieceCount;
    this.countMax = countMax;
    this.count = new Int32Array(pieceCount);
    this.order = new Int32Array(pieceCount);
    for (let piece = 0; piece < pieceCount; piece++) this.order[piece] = piece;
    random.shuffle(this.order);
    this.position = new Int32Array(pieceCount);
    for (let i = 0; i < pieceCount; i++) this.position[this.order[i]!] = i;
    // Every piece starts with no copies: bucket 0 is everything, the others are empty at the end.
    this.bucketStart = new Int32Array(countMax + 2).fill(pieceCount);
    this.bucketStart[0] = 0;
  }

  /** Pieces held by at least one host. */
  get heldSomewhere(): number {
    return this.pieceCount - this.bucketStart[1]!;
  }

  /** Pieces held by no host: only the origin can serve them. */
  get heldNowhere(): number {
    return this.bucketStart[1]!;
  }

  /** Where the bucket of pieces with `copies` copies begins and ends in `order`. */
  bucketBegin(copies: number): number {
    return this.bucketStart[copies]!;
  }

  bucketEnd(copies: number): number {
    return this.bucketStart[copies + 1]!;
  }

  increment(piece: number): void {
    const copies = this.count[piece]!;
    if (copies >= this.countMax) assert(false, `piece ${piece} has more copies than hosts`);
    // Swap the piece to the last slot of its bucket, then shrink the bucket by one from the top.
    const last = this.bucketStart[copies + 1]! - 1;
    this.swap(this.position[piece]!, last);
    this.bucketStart[copies + 1] = last;
    this.count[piece] = copies + 1;
  }

  decrement(piece: number): void {
    const copies = this.count[piece]!;
    if (copies <= 0) assert(false, `piece ${piece} lost a copy it did not have`);
    // Swap the piece to the first slot of its bucket, then start the bucket one later.
    const first = this.bucketStart[copies]!;
    this.swap(this.position[piece]!, first);
    this.bucketStart[copies] = first + 1;
    this.count[piece] = copies - 1;
  }

  /** Asserts that `order` is sorted by copies, `position` is its inverse and buckets bound it (tests). */
  checkOrder(): void {
    for (let i = 0; i < this.pieceCount; i++) {
      const piece = this.order[i]!;
      if (this.position[piece] !== i)
        assert(false, `rarity: piece ${piece} is at ${i}, position says otherwise`);
      const copies = this.count[piece]!;
      if (i < this.bucketStart[copies]! || i >= this.bucketStart[copies + 1]!)
        assert(false, `rarity: piece ${piece} with ${copies} copies is outside its bucket`);
    }
  }

  private swap(i: number, j: number): void {
    if (i === j) return;
    const a = this.order[i]!;
    const b = this.order[j]!;
    this.order[i] = b;
    this.order[j] = a;
    this.position[b] = i;
    this.position[a] = j;
  }
}
