/**
 * An agent's uploads to peers, shared by its two ways of serving them (HTTP ranges and the peer
 * wire): a fixed number of slots (a request beyond them is answered "busy") and a pool of piece
 * buffers, so that serving does not allocate a multi-MiB buffer per piece.
 */

import { pieceBuffer } from '../../piece/direct-io.js';

export class UploadSlots {
  private active = 0;
  private readonly pool: Buffer[] = [];

  constructor(readonly slotsMax: number) {}

  /** Takes a slot if one is free. */
  tryAcquire(): boolean {
    if (this.active >= this.slotsMax) return false;
    this.active += 1;
    return true;
  }

  release(): void {
    this.active -= 1;
  }

  get busy(): number {
    return this.active;
  }

  /**
   * A buffer of at least `length` bytes (a pooled one when it is large enough), to be handed back
   * with `giveBack` once nothing refers to it any more.
   */
  take(length: number, pooledLength: number): Buffer {
    const pooled = this.pool.pop();
    if (pooled !== undefined && pooled.length >= length) return pooled;
    return pieceBuffer(Math.max(length, pooledLength));
  }

  /** Returns a buffer no write refers to any more; the pool keeps one per slot. */
  giveBack(buffer: Buffer): void {
    if (this.pool.length < this.slotsMax) this.pool.push(buffer);
  }
}
