/**
 * The ring pusher: what a ring parent pushes to its one child, and in what order (ring-plan.ts).
 *
 * The child subscribes with the bitfield of what it holds. From then on the parent pushes, first
 * the pieces it already holds that the child lacks (ascending), then every piece it verifies that
 * the child lacks, in the order it verified them. The child tells its parent of pieces it gains
 * some other way (its first copies from the origin, per-piece repairs), so they are not pushed;
 * a piece pushed is taken as held by the child from then on.
 *
 * Pure and small: a bitfield of the child's pieces, one of the pieces queued, and a FIFO of piece
 * numbers. The agent's peer-wire server and the simulator run the same rule, so the scheduler's
 * view of a ring (the simulator's) is the agents'.
 */

import { assert } from '../../errors.js';
import { clearBit, hasBit, newBitfield, setBit } from './bitfield.js';

const NONE = -1;

export class RingPusher {
  private readonly pieceCount: number;
  private childHeld: Uint32Array | undefined;
  private readonly queuedBits: Uint32Array;
  private queue: number[] = [];
  private head = 0;

  constructor(pieceCount: number) {
    assert(Number.isInteger(pieceCount) && pieceCount > 0, 'ring pusher pieceCount must be > 0');
    this.pieceCount = pieceCount;
    this.queuedBits = newBitfield(pieceCount);
  }

  get subscribed(): boolean {
    return this.childHeld !== undefined;
  }

  /** Pieces waiting to be pushed (some may turn out held by the child and be skipped). */
  get queued(): number {
    return this.queue.length - this.head;
  }

  /**
   * A child subscribes (a new one replaces the old): `childHeld` is its bitfield, `ownHeld` the
   * parent's; the backlog is every piece of the parent's that the child lacks.
   */
  subscribe(childHeld: Uint32Array, ownHeld: Uint32Array): void {
    const words = this.queuedBits.length;
    assert(childHeld.length === words && ownHeld.length === words, 'ring subscribe: bitfield size');
    this.childHeld = Uint32Array.from(childHeld);
    this.clearQueue();
    for (let piece = 0; piece < this.pieceCount; piece++) {
      if (hasBit(ownHeld, piece) && !hasBit(this.childHeld, piece)) this.enqueue(piece);
    }
  }

  unsubscribe(): void {
    this.childHeld = undefined;
    this.clearQueue();
  }

  /** The child gained `piece` some other way: it is not pushed. */
  childHas(piece: number): void {
    if (this.childHeld === undefined || !this.inRange(piece)) return;
    setBit(this.childHeld, piece);
  }

  /** The parent verified `piece`: queued for the child unless the child holds it. */
  verified(piece: number): void {
    if (this.childHeld === undefined || !this.inRange(piece) || hasBit(this.childHeld, piece)) return;
    this.enqueue(piece);
  }

  /**
   * Takes `piece` to push now, ahead of the queue (its bytes are arriving and can be passed on as
   * they do): true when the child lacks it, which from now on it is taken to hold.
   */
  take(piece: number): boolean {
    const childHeld = this.childHeld;
    if (childHeld === undefined || !this.inRange(piece) || hasBit(childHeld, piece)) return false;
    setBit(childHeld, piece);
    return true;
  }

  /** The next piece to push, taken as the child's from now on; -1 when there is none. */
  next(): number {
    const childHeld = this.childHeld;
    if (childHeld === undefined) return NONE;
    while (this.head < this.queue.length) {
      const piece = this.queue[this.head++] as number;
      clearBit(this.queuedBits, piece);
      if (hasBit(childHeld, piece)) continue;
      setBit(childHeld, piece);
      this.compact();
      return piece;
    }
    this.compact();
    return NONE;
  }

  private enqueue(piece: number): void {
    if (hasBit(this.queuedBits, piece)) return;
    setBit(this.queuedBits, piece);
    this.queue.push(piece);
  }

  private clearQueue(): void {
    this.queue = [];
    this.head = 0;
    this.queuedBits.fill(0);
  }

  /** Drops the consumed front of the FIFO once it is most of the array. */
  private compact(): void {
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }

  private inRange(piece: number): boolean {
    return Number.isInteger(piece) && piece >= 0 && piece < this.pieceCount;
  }
}
