/**
 * Parent search: which host should send `piece` to `host` now. It owns the host sets the search
 * reads: hosts with a free upload slot (as bits, plus a count), each host's rack and zone (as bit
 * groups), and each host's own bans (parents that sent it corrupt bytes).
 *
 * Eligible parents of a piece are the bits of `holder row & free uploaders & not banned`, found in
 * one pass over the row's words from a random word (so no id range is favoured). Candidates in the
 * host's rack, its zone and elsewhere are scored with parentScore() up to PARENT_CANDIDATES_MAX per
 * tier, farther tiers only while nothing healthy and nearer has been found; the pass stops once the
 * best possible tier is taken. Equal scores go to a random candidate. The cost is one AND per
 * 32 hosts plus a few scores, with no allocation. A host with a rack label looks outside its rack
 * only when the rack crossing rule allows (racks.ts, mayCross), asked at most once per search.
 */

import { lowestBit } from './bitfield.js';
import { HostBits, LabelGroups, type HolderBits } from './holders.js';
import {
  localityTier,
  parentScore,
  TIER_OTHER,
  TIER_RACK,
  TIER_ZONE,
  type ParentRecords,
} from './parent-score.js';
import type { ParentFinder } from './piece-select.js';
import type { RackCrossings } from './racks.js';
import type { Random } from './random.js';
import type { TransferTable } from './transfers.js';

/** Eligible parents scored per locality tier of one search (the rest are not looked at). */
export const PARENT_CANDIDATES_MAX = 4;
/** Parents a host may ban for itself; the oldest ban is forgotten beyond this. */
export const BANS_PER_HOST_MAX = 32;

const NONE = -1;
const ACROSS_UNKNOWN = 0;
const ACROSS_YES = 1;
const ACROSS_NO = 2;
/** The lowest scores of a parent that is not demoted: anywhere, in the zone, in the rack. */
const HEALTHY_MIN = parentScore(false, TIER_OTHER, 0);
const HEALTHY_ZONE_MIN = parentScore(false, TIER_ZONE, 0);
const HEALTHY_RACK_MIN = parentScore(false, TIER_RACK, 0);

export class ParentSearch implements ParentFinder {
  private readonly holders: HolderBits;
  private readonly transfers: TransferTable;
  private readonly parents: ParentRecords;
  private readonly random: Random;
  private readonly uploadsMax: number;
  /** The rack crossing rule's counts (racks.ts); without them a host may fetch from any rack. */
  private readonly crossings: RackCrossings | undefined;

  private readonly free = new HostBits();
  private freeCount = 0;
  private readonly racks = new LabelGroups();
  private readonly zones = new LabelGroups();
  private zone = new Int32Array(0);
  private rack = new Int32Array(0);
  private bans: Array<Int32Array | undefined> = [];
  private banCounts = new Int32Array(0);

  /** The running best of the current search (fields, so a search allocates nothing). */
  private best = NONE;
  private bestScore = -1;
  private ties = 0;

  constructor(
    holders: HolderBits,
    transfers: TransferTable,
    parents: ParentRecords,
    random: Random,
    uploadsMax: number,
    crossings?: RackCrossings,
  ) {
    this.holders = holders;
    this.transfers = transfers;
    this.parents = parents;
    this.random = random;
    this.uploadsMax = uploadsMax;
    this.crossings = crossings;
  }

  /** Makes room for host ids below `hostCount` (call after the holder rows grew). */
  ensureHosts(hostCount: number): void {
    // Free-uploader words are ANDed word by word with holder rows: keep them as wide.
    this.free.ensure(this.holders.rowWords * 32 - 1);
    if (hostCount <= this.zone.length) return;
    const size = Math.max(hostCount, this.zone.length * 2);
    this.zone = grown(this.zone, size, NONE);
    this.rack = grown(this.rack, size, NONE);
    this.banCounts = grown(this.banCounts, size, 0);
  }

  /** A host joins with its labels (-1: none); it starts with no bans and no free upload slot. */
  join(host: number, zone: number, rack: number): void {
    this.zone[host] = zone;
    this.rack[host] = rack;
    if (zone >= 0) this.zones.add(zone, host);
    if (rack >= 0) this.racks.add(rack, host);
    this.bans[host] = undefined;
    this.banCounts[host] = 0;
  }

  leave(host: number): void {
    this.setFree(host, false);
    const zone = this.zone[host]!;
    const rack = this.rack[host]!;
    if (zone >= 0) this.zones.delete(zone, host);
    if (rack >= 0) this.racks.delete(rack, host);
    this.bans[host] = undefined;
    this.banCounts[host] = 0;
  }

  zoneOf(host: number): number {
    return this.zone[host]!;
  }

  rackOf(host: number): number {
    return this.rack[host]!;
  }

  /** Hosts with a free upload slot (present, unbanned, holding something). */
  get freeUploaders(): number {
    return this.freeCount;
  }

  isFree(host: number): boolean {
    return this.free.has(host);
  }

  setFree(host: number, free: boolean): void {
    if (free === this.free.has(host)) return;
    if (free) this.free.add(host);
    else this.free.delete(host);
    this.freeCount += free ? 1 : -1;
  }

  /**
   * Every host's ban of `parent` is lifted: its id is about to name another host (the scheduler
   * reuses the ids of hosts that leave unblamed).
   */
  forgetBansOf(parent: number): void {
    for (let host = 0; host < this.banCounts.length; host++) {
      if (this.banCounts[host] === 0 || !this.isBannedFor(host, parent)) continue;
      const kept = this.bannedBy(host).filter((banned) => banned !== parent);
      this.bans[host] = undefined;
      this.banCounts[host] = 0;
      for (const banned of kept) this.ban(host, banned);
    }
  }

  /** `host` will not fetch from `parent` again (it sent `host` corrupt bytes, or kept failing it). */
  ban(host: number, parent: number): void {
    if (this.isBannedFor(host, parent)) return;
    const bans = (this.bans[host] ??= new Int32Array(BANS_PER_HOST_MAX));
    bans[this.banCounts[host]! % BANS_PER_HOST_MAX] = parent;
    this.banCounts[host]!++;
  }

  hasBans(host: number): boolean {
    return this.banCounts[host]! > 0;
  }

  isBannedFor(host: number, parent: number): boolean {
    const count = Math.min(this.banCounts[host]!, BANS_PER_HOST_MAX);
    if (count === 0) return false;
    const bans = this.bans[host]!;
    for (let i = 0; i < count; i++) if (bans[i] === parent) return true;
    return false;
  }

  bannedBy(host: number): number[] {
    const bans = this.bans[host];
    if (bans === undefined) return [];
    return Array.from(bans.subarray(0, Math.min(this.banCounts[host]!, BANS_PER_HOST_MAX)));
  }

  /** True when every holder of `piece` is banned for `host` (then only the origin can serve it). */
  allHoldersBanned(host: number, piece: number): boolean {
    const rows = this.holders.rows;
    const base = piece * this.holders.rowWords;
    for (let w = 0; w < this.holders.rowWords; w++) {
      let bits = rows[base + w]!;
      while (bits !== 0) {
        const parent = (w << 5) + lowestBit(bits);
        bits &= bits - 1;
        if (!this.isBannedFor(host, parent)) return false;
      }
    }
    return true;
  }

  /**
   * The best eligible parent of `piece` for `host`, never `exclude`; -1 when none is free now. A
   * host with a rack label looks outside its rack only when mayCross allows (racks.ts).
   */
  findParent(host: number, piece: number, exclude: number): number {
    return this.search(host, piece, exclude, true);
  }

  /** findParent without the rack crossing rule (a piece a loader waits for). */
  findParentAnywhere(host: number, piece: number): number {
    return this.search(host, piece, NONE, false);
  }

  /**
   * Whether `host` (in `rack`) may fetch `piece` from another rack now (racks.ts): its rack has room
   * for another piece on its way in, the piece is not on its way in already, and while the origin
   * is sending, no healthy rack-mate holds it. A host with bans of its own is exempt: it has fewer
   * parents left, and the copy it would wait for may come from one it refuses.
   */
  mayCross(host: number, rack: number, piece: number): boolean {
    const crossings = this.crossings;
    if (crossings === undefined || this.banCounts[host]! > 0) return true;
    if (!crossings.hasRoom(rack) || crossings.isComing(rack, piece)) return false;
    return !crossings.originSending || !this.rackHolds(rack, piece);
  }

  /** True when a host of `rack` that is neither banned nor demoted holds `piece`. */
  rackHolds(rack: number, piece: number): boolean {
    const bits = this.racks.bits(rack);
    if (bits === undefined) return false;
    const base = piece * this.holders.rowWords;
    for (const w of this.racks.wordIndices(rack)) {
      let held = this.holders.rows[base + w]! & bits[w]!;
      while (held !== 0) {
        if (!this.parents.isDemoted((w << 5) + lowestBit(held))) return true;
        held &= held - 1;
      }
    }
    return false;
  }

  private search(host: number, piece: number, exclude: number, gated: boolean): number {
    this.best = NONE;
    this.bestScore = -1;
    this.ties = 0;
    const rack = this.rack[host]!;
    const zone = this.zone[host]!;
    const rackBits = rack >= 0 ? this.racks.bits(rack) : undefined;
    const zoneBits = zone >= 0 ? this.zones.bits(zone) : undefined;
    const topHealthy = rack >= 0 ? HEALTHY_RACK_MIN : zone >= 0 ? HEALTHY_ZONE_MIN : HEALTHY_MIN;
    const rows = this.holders.rows;
    const rowWords = this.holders.rowWords;
    const base = piece * rowWords;
    const free = this.free.words;
    let near = 0;
    let middle = 0;
    let far = 0;
    // Outside the rack: unknown until a candidate there is met (most searches never meet one).
    let across = rack < 0 || !gated ? ACROSS_YES : ACROSS_UNKNOWN;
    // Most rows have no eligible bit at all: the tight test comes first, the tiers only on a hit.
    for (let i = 0, w = this.random.below(rowWords); i < rowWords; i++, w = w + 1 === rowWords ? 0 : w + 1) {
      const eligible = rows[base + w]! & free[w]!;
      if (eligible === 0) continue;
      const inRack = rackBits !== undefined && w < rackBits.length ? eligible & rackBits[w]! : 0;
      near = this.considerBits(host, inRack, w, exclude, near);
      if (this.bestScore >= HEALTHY_RACK_MIN) continue;
      if (across === ACROSS_UNKNOWN && (eligible & ~inRack) !== 0)
        across = this.mayCross(host, rack, piece) ? ACROSS_YES : ACROSS_NO;
      if (across === ACROSS_NO) continue;
      const inZone = zoneBits !== undefined && w < zoneBits.length ? eligible & zoneBits[w]! & ~inRack : 0;
      middle = this.considerBits(host, inZone, w, exclude, middle);
      if (this.bestScore >= HEALTHY_ZONE_MIN) continue;
      far = this.considerBits(host, eligible & ~inRack & ~inZone, w, exclude, far);
      if (this.bestScore >= topHealthy && near + middle + far >= PARENT_CANDIDATES_MAX) break;
    }
    return this.best;
  }

  /** How `host` ranks `parent` now (higher is better), or -1 when it may not fetch from it. */
  score(host: number, parent: number, exclude: number): number {
    if (parent === host || parent === exclude) return -1;
    const uploads = this.transfers.uploads[parent]!;
    if (uploads >= this.uploadsMax || this.parents.banned[parent] === 1) return -1;
    if (this.isBannedFor(host, parent)) return -1;
    const tier = localityTier(this.zone[host]!, this.rack[host]!, this.zone[parent]!, this.rack[parent]!);
    const idle = this.parents.idleBytesPerSecond(parent, uploads, this.uploadsMax);
    return parentScore(this.parents.isDemoted(parent), tier, idle);
  }

  /** Scores the hosts in one word of bits until `scored` reaches PARENT_CANDIDATES_MAX; returns it. */
  private considerBits(host: number, bits: number, word: number, exclude: number, scored: number): number {
    while (bits !== 0 && scored < PARENT_CANDIDATES_MAX) {
      const parent = (word << 5) + lowestBit(bits);
      bits &= bits - 1;
      if (this.consider(host, parent, exclude)) scored++;
    }
    return scored;
  }

  /** Scores one candidate against the best so far (reservoir sampling over equal scores). */
  private consider(host: number, parent: number, exclude: number): boolean {
    const score = this.score(host, parent, exclude);
    if (score < 0) return false;
    if (score > this.bestScore) {
      this.best = parent;
      this.bestScore = score;
      this.ties = 1;
    } else if (score === this.bestScore && this.random.below(++this.ties) === 0) {
      this.best = parent;
    }
    return true;
  }
}

function grown(array: Int32Array, size: number, fill: number): Int32Array<ArrayBuffer> {
  const out = new Int32Array(size).fill(fill);
  out.set(array);
  return out;
}
