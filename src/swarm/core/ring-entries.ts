/**
 * Ring entries: for each ring (ring-plan.ts), the pieces no member holds or fetches that some host
 * outside it holds. A fed member fetches those per piece (an entry), and the ring carries each on
 * to every other member; so a piece enters each ring once, from the origin (a first copy) or from
 * a host outside the ring, and a swarm of many rings, or of a ring and hosts planned per piece,
 * still gets every piece everywhere.
 *
 * Per ring: a count per piece of members holding it or fetching it (a transfer in flight to a
 * member), and the set of pieces whose count is 0 while some counted host holds them (the core's
 * rarity count above 0). The core reports each change of a member's pieces and transfers, and each
 * piece that becomes available or unavailable; every update is O(1) per ring it concerns (a piece
 * becoming available or not touches every ring: rings are few, a sixteenth of the hosts).
 */

import { assert } from '../../errors.js';
import { IntSet } from './int-set.js';

const NONE = -1;
/** Members' holdings and transfers of one piece fit in 16 bits with room to spare. */
const COUNT_MAX = 0xffff;

interface Ring {
  copies: Uint16Array;
  lacking: IntSet;
  members: IntSet;
}

export class RingEntries {
  private readonly pieceCount: number;
  private readonly rings = new Map<number, Ring>();
  private ringOfHost = new Int32Array(0);
  /** Rings whose lacking set gained a piece since the last takeGrown. */
  private readonly grown = new Set<number>();

  constructor(pieceCount: number) {
    this.pieceCount = pieceCount;
  }

  ensureHosts(hostCount: number): void {
    if (hostCount <= this.ringOfHost.length) return;
    const grown = new Int32Array(Math.max(hostCount, this.ringOfHost.length * 2)).fill(NONE);
    grown.set(this.ringOfHost);
    this.ringOfHost = grown;
  }

  ringOf(host: number): number {
    return host < this.ringOfHost.length ? this.ringOfHost[host]! : NONE;
  }

  /** The pieces `ring` lacks that some host outside it holds (empty for an unknown ring). */
  lacking(ring: number): IntSet | undefined {
    return this.rings.get(ring)?.lacking;
  }

  /** The members of `ring`. */
  members(ring: number): IntSet | undefined {
    return this.rings.get(ring)?.members;
  }

  /** Rings with new entries since the last call (their idle members may have work now). */
  takeGrown(): number[] {
    const out = [...this.grown];
    this.grown.clear();
    return out;
  }

  /**
   * Moves `host` into `ring` (NONE: out of every ring); `pieces` are what it holds and fetches now
   * (a piece twice if both), `available(piece)` whether some counted host holds the piece.
   */
  setRing(host: number, ring: number, pieces: Iterable<number>, available: (piece: number) => boolean): void {
    const old = this.ringOf(host);
    if (old === ring) return;
    const list = [...pieces];
    if (old !== NONE) {
      for (const piece of list) this.count(old, piece, -1, available(piece));
      const left = this.rings.get(old)!;
      left.members.delete(host);
      if (left.members.size === 0) {
        this.rings.delete(old);
        this.grown.delete(old);
      }
    }
    this.ringOfHost[host] = ring;
    if (ring === NONE) return;
    let joined = this.rings.get(ring);
    if (joined === undefined) {
      joined = { copies: new Uint16Array(this.pieceCount), lacking: new IntSet(64), members: new IntSet(16) };
      for (let piece = 0; piece < this.pieceCount; piece++) if (available(piece)) joined.lacking.add(piece);
      this.rings.set(ring, joined);
      if (joined.lacking.size > 0) this.grown.add(ring);
    }
    joined.members.add(host);
    for (const piece of list) this.count(ring, piece, +1, true);
  }

  /** `host` came to hold or fetch `piece` (+1), or stopped holding or fetching it (-1). */
  change(host: number, piece: number, delta: 1 | -1, available: boolean): void {
    const ring = this.ringOf(host);
    if (ring !== NONE) this.count(ring, piece, delta, available);
  }

  /** `piece` became available (some counted host holds it) or not. */
  availability(piece: number, available: boolean): void {
    for (const [id, ring] of this.rings) {
      if (!available) ring.lacking.delete(piece);
      else if (ring.copies[piece] === 0) {
        ring.lacking.add(piece);
        this.grown.add(id);
      }
    }
  }

  /** Asserts the lacking sets agree with the counts (checkInvariants). */
  check(available: (piece: number) => boolean): void {
    for (const [id, ring] of this.rings) {
      for (let piece = 0; piece < this.pieceCount; piece++) {
        const lacking = ring.copies[piece] === 0 && available(piece);
        if (ring.lacking.has(piece) !== lacking)
          assert(false, `ring ${id}: piece ${piece} lacking ${ring.lacking.has(piece)}, expected ${lacking}`);
      }
    }
  }

  /** Per ring, a count per piece, for checkInvariants to recount against. */
  copiesOf(ring: number): Uint16Array | undefined {
    return this.rings.get(ring)?.copies;
  }

  private count(ringId: number, piece: number, delta: 1 | -1, available: boolean): void {
    const ring = this.rings.get(ringId)!;
    const before = ring.copies[piece]!;
    assert(delta > 0 ? before < COUNT_MAX : before > 0, `ring ${ringId}: piece ${piece} count ${before}`);
    ring.copies[piece] = before + delta;
    if (before === 0) ring.lacking.delete(piece);
    else if (before === 1 && delta < 0 && available) {
      ring.lacking.add(piece);
      this.grown.add(ringId);
    }
  }
}
