/**
 * What a parent with a free upload slot offers a waiting host. Each host keeps a ring of the pieces
 * it verified last (RECENT_PIECES, in one flat Int32Array); under rarest-first those are the rarest
 * pieces it has, so a parent offers the newest of them that the host lacks. The scan stops at the
 * first hit because every test reads the host's bitfield. When the host has all of them, a window
 * of the two bitfields (OFFER_WINDOW_WORDS words from a random one) gives the rarest piece the
 * parent has and the host lacks.
 */

import { hasBit, lowestBit } from './bitfield.js';
import type { HostPieces } from './piece-select.js';
import type { Random } from './random.js';
import type { RarityIndex } from './rarity.js';

/** Pieces each host remembers having verified last. */
export const RECENT_PIECES = 16;
/** Words of two bitfields compared when a parent's recent pieces are no use to a host. */
export const OFFER_WINDOW_WORDS = 8;

const NONE = -1;

export class RecentPieces {
  private ring = new Int32Array(0);
  private next = new Int32Array(0);

  ensureHosts(hostCount: number): void {
    if (hostCount <= this.next.length) return;
    const size = Math.max(hostCount, this.next.length * 2);
    const ring = new Int32Array(size * RECENT_PIECES).fill(NONE);
    ring.set(this.ring);
    this.ring = ring;
    const next = new Int32Array(size);
    next.set(this.next);
    this.next = next;
  }

  clear(host: number): void {
    this.ring.fill(NONE, host * RECENT_PIECES, (host + 1) * RECENT_PIECES);
    this.next[host] = 0;
  }

  push(host: number, piece: number): void {
    const next = this.next[host]!;
    this.ring[host * RECENT_PIECES + next] = piece;
    this.next[host] = (next + 1) % RECENT_PIECES;
  }

  /** The newest recent piece of `parent` that `target` neither holds nor has in flight, or -1. */
  newestLacking(parent: number, target: HostPieces): number {
    const base = parent * RECENT_PIECES;
    const newest = this.next[parent]! + RECENT_PIECES - 1;
    for (let i = 0; i < RECENT_PIECES; i++) {
      const piece = this.ring[base + ((newest - i) % RECENT_PIECES)]!;
      if (piece === NONE) return NONE;
      if (!hasBit(target.held, piece) && !target.inFlight.has(target.host, piece)) return piece;
    }
    return NONE;
  }
}

/**
 * The rarest piece in a random window of `windowWords` words of `parentHeld` that `target` lacks and
 * has not in flight, or -1.
 */
export function rarestInWindow(
  parentHeld: Uint32Array,
  target: HostPieces,
  rarity: RarityIndex,
  random: Random,
  windowWords = OFFER_WINDOW_WORDS,
): number {
  const held = target.held;
  const words = held.length;
  const start = random.below(words);
  let best = NONE;
  let bestCopies = Infinity;
  for (let step = 0; step < Math.min(words, windowWords); step++) {
    const w = (start + step) % words;
    let wanted = parentHeld[w]! & ~held[w]!;
    while (wanted !== 0) {
      const piece = (w << 5) + lowestBit(wanted);
      wanted &= wanted - 1;
      const copies = rarity.count[piece]!;
      if (copies < bestCopies && !target.inFlight.has(target.host, piece)) {
        best = piece;
        bestCopies = copies;
      }
    }
  }
  return best;
}
