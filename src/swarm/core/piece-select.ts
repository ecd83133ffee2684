/**
 * Rarest-first piece selection for one host: the rarest piece it neither holds nor has in flight
 * that some eligible parent can send now, ties broken at random. Two strategies, both bounded:
 *
 * - Walk: while the host lacks many pieces, walk the rarity index from bucket 1 (pieces no host holds
 *   are the origin's business), starting each bucket at a random offset. Most rare pieces are ones
 *   the host lacks, so the walk usually stops within a few steps.
 * - Missing list: once the host lacks at most missingListMax() pieces, walking past everything it
 *   holds would cost more than looking at what it lacks, so the pieces it lacks are listed once (a
 *   bitfield scan) and a window of the list is scanned instead; arrived pieces are dropped from it
 *   in batches.
 *
 * Parent eligibility and ranking belong to the caller (`ParentFinder`); this module only decides
 * which piece to ask about next.
 */

import { collectClearBits, hasBit } from './bitfield.js';
import type { InFlightPieces } from './in-flight.js';
import type { Random } from './random.js';
import type { RarityIndex } from './rarity.js';

/**
 * Pieces whose parents are looked up in one selection before the host waits for something to
 * change. When every holder of the rare pieces is busy, a longer search mostly finds the same; a
 * parent whose upload slot frees then offers its pieces to waiting hosts instead (see SwarmCore).
 */
export const WALK_PARENT_CHECKS_MAX = 8;
/** The same for the missing list, whose passes look up parents for the rarest pieces first. */
export const MISSING_PARENT_CHECKS_MAX = 32;
/** Held or in-flight pieces a walk steps over before giving up. */
export const WALK_SKIPS_MAX = 1024;
/** A host lacking at most `missingListMax(pieceCount)` pieces may select from a list of them. */
export const MISSING_LIST_MAX = 1024;
/**
 * Entries of the missing list one selection looks at: all of a short list (small swarms choose
 * exactly), a sample of a long one (each entry costs a few random reads); and how many of the
 * rarest are kept for parent lookups.
 */
export const MISSING_WINDOW_SMALL_SWARM = 64;
export const MISSING_WINDOW = 16;
const FEWEST_KEPT = 8;

/**
 * Where the missing list starts to pay: a walk steps over about pieceCount / lacking held pieces
 * per find, a windowed list scan costs MISSING_WINDOW; past 1% of the pieces the walk is cheaper.
 */
export function missingListMax(pieceCount: number): number {
  return Math.max(MISSING_WINDOW_SMALL_SWARM, Math.min(MISSING_LIST_MAX, Math.round(pieceCount / 100)));
}

export interface ParentFinder {
  /** The best eligible parent of `piece` for `host`, never `exclude`; -1 when there is none now. */
  findParent(host: number, piece: number, exclude: number): number;
}

/** The result of a selection, reused across calls so the hot path allocates nothing. */
export class Pick {
  piece = -1;
  parent = -1;
  /** Scratch for the missing-list scan: pieces with the fewest copies seen. */
  readonly fewest = new Int32Array(FEWEST_KEPT);
}

export interface HostPieces {
  host: number;
  held: Uint32Array;
  inFlight: InFlightPieces;
}

/**
 * Walks the rarity index for the rarest available piece `target` lacks, among pieces with fewer
 * than `copiesBelow` copies, asking for at most `checksMax` parents.
 */
export function pickByWalk(
  rarity: RarityIndex,
  target: HostPieces,
  random: Random,
  finder: ParentFinder,
  pick: Pick,
  checksMax: number,
  copiesBelow: number,
): boolean {
  const { host, held, inFlight } = target;
  let parentChecks = 0;
  let skips = 0;
  for (let begin = rarity.bucketBegin(1); begin < rarity.pieceCount;) {
    const copies = rarity.count[rarity.order[begin]!]!;
    if (copies >= copiesBelow) return false;
    const end = rarity.bucketEnd(copies);
    const size = end - begin;
    const offset = random.below(size);
    for (let i = 0; i < size; i++) {
      const piece = rarity.order[begin + ((offset + i) % size)]!;
      if (hasBit(held, piece) || inFlight.has(host, piece)) {
        if (++skips >= WALK_SKIPS_MAX) return false;
        continue;
      }
      const parent = finder.findParent(host, piece, -1);
      if (parent >= 0) {
        pick.piece = piece;
        pick.parent = parent;
        return true;
      }
      if (++parentChecks >= checksMax) return false;
    }
    begin = end;
  }
  return false;
}

/** Per-host lists of missing pieces, built when a host enters its last missingListMax() pieces. */
export class MissingLists {
  private readonly lists: Array<Int32Array | undefined> = [];
  private readonly lengths: number[] = [];

  has(host: number): boolean {
    return this.lists[host] !== undefined;
  }

  /** Lists the pieces `held` lacks, at most MISSING_LIST_MAX (the caller checks there are no more). */
  build(host: number, held: Uint32Array, pieceCount: number, random: Random): void {
    const list = new Int32Array(MISSING_LIST_MAX);
    this.lengths[host] = collectClearBits(held, pieceCount, random.below(held.length), list);
    this.lists[host] = list;
  }

  drop(host: number): void {
    this.lists[host] = undefined;
    this.lengths[host] = 0;
  }

  length(host: number): number {
    return this.lengths[host] ?? 0;
  }

  at(host: number, i: number): number {
    return this.lists[host]![i]!;
  }

  /** The host's list itself (valid up to length(host)), for scans. */
  listOf(host: number): Int32Array {
    return this.lists[host]!;
  }

  /**
   * Removes pieces the host now holds (swap with the last entry; order is random anyway), once
   * they are half the list: `lacking` is how many the host still lacks, so the cost is amortised
   * over the pieces that arrived.
   */
  compact(host: number, held: Uint32Array, lacking: number): void {
    let length = this.lengths[host]!;
    if (length - lacking <= length >>> 1) return;
    const list = this.lists[host]!;
    for (let i = 0; i < length;) {
      if (hasBit(held, list[i]!)) list[i] = list[--length]!;
      else i++;
    }
    this.lengths[host] = length;
  }
}

/**
 * The rarest fetchable piece in a window of `windowMax` entries of `target`'s missing list from a
 * random start (the whole list when it is shorter: then the choice is exactly rarest-first). One
 * pass finds the fewest copies in the window and remembers up to FEWEST_KEPT pieces with that many;
 * parents are looked up for those first, and usually the first has one. If all of them are busy,
 * the next levels of copies follow, rarest first, until a parent is found or the lookups run out.
 */
export function pickFromMissing(
  missing: MissingLists,
  rarity: RarityIndex,
  target: HostPieces,
  random: Random,
  finder: ParentFinder,
  pick: Pick,
  checksMax: number,
  windowMax: number,
): boolean {
  const { host, held, inFlight } = target;
  const length = missing.length(host);
  if (length === 0) return false;
  const list = missing.listOf(host);
  const start = random.below(length);
  const window = Math.min(length, windowMax);
  const kept = pick.fewest;
  let keptCount = 0;
  let fewest = Infinity;
  for (let i = 0, at = start; i < window; i++, at = at + 1 === length ? 0 : at + 1) {
    const piece = list[at]!;
    const copies = rarity.count[piece]!;
    if (copies === 0 || copies > fewest || hasBit(held, piece) || inFlight.has(host, piece)) continue;
    if (copies < fewest) {
      fewest = copies;
      keptCount = 0;
    }
    if (keptCount < FEWEST_KEPT) kept[keptCount++] = piece;
  }
  let checks = 0;
  for (let i = 0; i < keptCount && checks < checksMax; i++, checks++) {
    const parent = finder.findParent(host, kept[i]!, -1);
    if (parent < 0) continue;
    pick.piece = kept[i]!;
    pick.parent = parent;
    return true;
  }
  // Then the levels of copies in turn, rarest first: each pass finds the fewest copies above the
  // last level looked at and looks up parents for the pieces with exactly that many. The fewest
  // level itself comes again when it had more pieces than were kept (the kept ones are skipped).
  let level = keptCount === FEWEST_KEPT ? fewest - 1 : fewest;
  while (checks < checksMax) {
    let next = Infinity;
    for (let i = 0, at = start; i < window; i++, at = at + 1 === length ? 0 : at + 1) {
      const piece = list[at]!;
      const copies = rarity.count[piece]!;
      if (copies > level && copies < next && !hasBit(held, piece) && !inFlight.has(host, piece))
        next = copies;
    }
    if (next === Infinity) return false;
    for (let i = 0, at = start; i < window && checks < checksMax; i++, at = at + 1 === length ? 0 : at + 1) {
      const piece = list[at]!;
      if (rarity.count[piece] !== next || hasBit(held, piece) || inFlight.has(host, piece)) continue;
      if (next === fewest && isAmong(kept, keptCount, piece)) continue;
      checks++;
      const parent = finder.findParent(host, piece, -1);
      if (parent < 0) continue;
      pick.piece = piece;
      pick.parent = parent;
      return true;
    }
    level = next;
  }
  return false;
}

/** Whether `value` is among the first `count` entries of `list` (no allocation, unlike subarray). */
function isAmong(list: Int32Array, count: number, value: number): boolean {
  for (let i = 0; i < count; i++) if (list[i] === value) return true;
  return false;
}
