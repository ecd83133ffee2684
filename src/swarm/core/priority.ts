/**
 * Per-host priority queues for lazy loading: pieces a loader on that host is waiting for right now.
 * Each queue is a ring of piece numbers in request order plus a bitfield for de-duplication, both
 * allocated the first time the host prioritizes anything. The core serves a host's queue before its
 * rarest-first choice; held pieces leave the queue when they reach its head.
 */

import { clearBit, hasBit, newBitfield, setBit } from './bitfield.js';

/** Pieces queued per host at most; later requests are dropped until the loader asks again. */
export const PRIORITY_PIECES_MAX = 4096;

interface Queue {
  ring: Int32Array;
  queued: Uint32Array;
  head: number;
  length: number;
}

export class PriorityQueues {
  private readonly queues: Array<Queue | undefined> = [];
  private readonly pieceCount: number;

  constructor(pieceCount: number) {
    this.pieceCount = pieceCount;
  }

  length(host: number): number {
    return this.queues[host]?.length ?? 0;
  }

  /** Queues the pieces `host` lacks; returns how many were newly queued. */
  add(host: number, pieces: readonly number[], held: Uint32Array): number {
    let queue = this.queues[host];
    let added = 0;
    for (const piece of pieces) {
      if (!Number.isInteger(piece) || piece < 0 || piece >= this.pieceCount || hasBit(held, piece)) continue;
      queue ??= this.create(host);
      if (hasBit(queue.queued, piece) || queue.length === PRIORITY_PIECES_MAX) continue;
      queue.ring[(queue.head + queue.length) % PRIORITY_PIECES_MAX] = piece;
      queue.length++;
      setBit(queue.queued, piece);
      added++;
    }
    return added;
  }

  /** The i-th queued piece of `host`, oldest first (i < length). */
  at(host: number, i: number): number {
    const queue = this.queues[host]!;
    return queue.ring[(queue.head + i) % PRIORITY_PIECES_MAX]!;
  }

  /** Drops pieces `host` now holds from the head of its queue. */
  dropHeldHead(host: number, held: Uint32Array): void {
    const queue = this.queues[host];
    if (queue === undefined) return;
    while (queue.length > 0) {
      const piece = queue.ring[queue.head]!;
      if (!hasBit(held, piece)) return;
      clearBit(queue.queued, piece);
      queue.head = (queue.head + 1) % PRIORITY_PIECES_MAX;
      queue.length--;
    }
  }

  clear(host: number): void {
    this.queues[host] = undefined;
  }

  private create(host: number): Queue {
    const queue = {
      ring: new Int32Array(PRIORITY_PIECES_MAX),
      queued: newBitfield(this.pieceCount),
      head: 0,
      length: 0,
    };
    this.queues[host] = queue;
    return queue;
  }
}
