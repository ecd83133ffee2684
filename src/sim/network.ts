/**
 * A fluid model of the network for the simulator: every transfer is a flow whose rate is set by the
 * links it crosses, and time advances in small fixed ticks. Within a tick rates are constant; a flow
 * that finishes mid-tick reports its exact finish time, so the next transfer can start then.
 *
 * Rates: a host's download link is shared equally by the flows into it; each upload link's capacity
 * (the origin's included) is water-filled over its flows, each capped by its share of the receiving
 * host's download link and, across racks, by its share of the rack uplinks. This is max-min fair from
 * the sender's side; one more round gives a download link's unused part (a flow from a busy sender
 * leaves some) to its other flows. It is cheap: O(flows) per tick. A flow that moves bytes for only
 * part of a tick (its first byte comes mid-tick, after its request latency, or its last byte does)
 * takes part in each share with that part as its weight, so links are not held for flows that have
 * not started or have already finished; a flow's finish is foreseen at its rate of the tick before
 * (a flow that then runs slower finishes in the next tick, never over its links).
 *
 * With `endingNoticeMs` > 0 the network also says, once per flow, when the flow's remaining bytes
 * will take that long at its current rate ('ending'): the simulator uses it to pipeline requests.
 * Pure: no clock, no randomness.
 */

import { assert } from '../errors.js';
import { FlowEvents, type FlowEvent } from './flow-events.js';
import { IdSlots } from './id-slots.js';

export type { FlowEvent } from './flow-events.js';

export interface Endpoint {
  uploadBytesPerMs: number;
  downloadBytesPerMs: number;
  /** Rack index, or -1 for none (the origin sits outside every rack). */
  rack: number;
}

const INITIAL_FLOWS = 1024;
/** A flow that moved this fraction of what it had left is done (a weight is a rounded quotient). */
const FINISHED = 1 - 1e-12;
/** A flow at this fraction of its download share got the full share (rounding aside). */
const FULL_SHARE = 1 - 1e-9;
/** Spare download capacity below this fraction of the link is not worth a round. */
const SPARE_MIN = 1e-6;

export class FluidNetwork {
  private readonly endpointCount: number;
  private readonly uploadBytesPerMs: Float64Array;
  private readonly downloadBytesPerMs: Float64Array;
  private readonly rackOf: Int32Array;
  private readonly rackUplinkBytesPerMs: number;
  private readonly racksLimit: boolean;
  private readonly endingNoticeMs: number;
  private readonly checkLinks: boolean;
  private capacity = INITIAL_FLOWS;
  private src = new Int32Array(INITIAL_FLOWS);
  private dst = new Int32Array(INITIAL_FLOWS);
  /** Core transfer ids are safe integers up to 2^53 (generation x 2^21 + slot): 32 bits would wrap. */
  private transferIds = new Float64Array(INITIAL_FLOWS);
  private size = new Float64Array(INITIAL_FLOWS);
  private remaining = new Float64Array(INITIAL_FLOWS);
  private startAt = new Float64Array(INITIAL_FLOWS);
  private rate = new Float64Array(INITIAL_FLOWS);
  /** The share of the current tick in which the flow moves bytes (0: not active this tick). */
  private weight = new Float64Array(INITIAL_FLOWS);
  private used = new Uint8Array(INITIAL_FLOWS);
  private noticed = new Uint8Array(INITIAL_FLOWS);
  private readonly free: number[] = [];
  private highWater = 0;
  private readonly slots = new IdSlots(INITIAL_FLOWS);
  // Scratch per endpoint and per rack, reused every tick.
  private readonly downWeight: Float64Array;
  private readonly upCount: Int32Array;
  private readonly upFirst: Int32Array;
  private readonly cursor: Int32Array;
  private readonly rackUpWeight: Float64Array;
  private readonly rackDownWeight: Float64Array;
  private order = new Int32Array(INITIAL_FLOWS);
  private readonly events = new FlowEvents();
  /** Per receiver this tick: its download share, the rate its flows use, the full-share weight. */
  private readonly downShare: Float64Array;
  private readonly downUsed: Float64Array;
  private readonly downFullWeight: Float64Array;
  /** Bytes each link carried this tick, when checkLinks is on. */
  private readonly carriedUp: Float64Array;
  private readonly carriedDown: Float64Array;
  private readonly rackCarriedUp: Float64Array;
  private readonly rackCarriedDown: Float64Array;

  /**
   * `rackUplinkBytesPerMs` 0 means racks are not a constraint; `endingNoticeMs` 0, no 'ending'
   * events. With `checkLinks` every step asserts that no link carried more than its capacity (an
   * extra pass over the flows: for tests).
   */
  constructor(
    endpoints: readonly Endpoint[],
    rackCount: number,
    rackUplinkBytesPerMs: number,
    endingNoticeMs = 0,
    checkLinks = false,
  ) {
    const count = endpoints.length;
    this.endpointCount = count;
    this.uploadBytesPerMs = Float64Array.from(endpoints, (e) => e.uploadBytesPerMs);
    this.downloadBytesPerMs = Float64Array.from(endpoints, (e) => e.downloadBytesPerMs);
    this.rackOf = Int32Array.from(endpoints, (e) => e.rack);
    this.rackUplinkBytesPerMs = rackUplinkBytesPerMs;
    this.racksLimit = rackUplinkBytesPerMs > 0 && rackCount > 0;
    this.endingNoticeMs = endingNoticeMs;
    this.checkLinks = checkLinks;
    this.downWeight = new Float64Array(count);
    this.upCount = new Int32Array(count);
    this.upFirst = new Int32Array(count + 1);
    this.cursor = new Int32Array(count);
    this.rackUpWeight = new Float64Array(Math.max(1, rackCount));
    this.rackDownWeight = new Float64Array(Math.max(1, rackCount));
    this.downUsed = new Float64Array(count);
    this.downFullWeight = new Float64Array(count);
    this.downShare = new Float64Array(count);
    this.carriedUp = new Float64Array(checkLinks ? count : 0);
    this.carriedDown = new Float64Array(checkLinks ? count : 0);
    this.rackCarriedUp = new Float64Array(checkLinks && this.racksLimit ? rackCount : 0);
    this.rackCarriedDown = new Float64Array(checkLinks && this.racksLimit ? rackCount : 0);
  }

  get flowCount(): number {
    return this.slots.size;
  }

  add(transferId: number, src: number, dst: number, bytes: number, startAtMs: number): void {
    if (this.slots.has(transferId)) assert(false, `transfer ${transferId} added twice`);
    const slot = this.free.pop() ?? this.grow();
    this.src[slot] = src;
    this.dst[slot] = dst;
    this.transferIds[slot] = transferId;
    this.size[slot] = bytes;
    this.remaining[slot] = bytes;
    this.startAt[slot] = startAtMs;
    this.rate[slot] = 0;
    this.used[slot] = 1;
    this.noticed[slot] = 0;
    this.slots.set(transferId, slot);
  }

  /** Removes a flow; returns the bytes it had delivered, or -1 if it was not there. */
  remove(transferId: number): number {
    const slot = this.slots.delete(transferId);
    if (slot < 0) return -1;
    this.used[slot] = 0;
    this.free.push(slot);
    return this.size[slot]! - this.remaining[slot]!;
  }

  /** The sender of a flow, or -1 if it is not there. */
  sender(transferId: number): number {
    const slot = this.slots.get(transferId);
    return slot < 0 ? -1 : this.src[slot]!;
  }

  receiver(transferId: number): number {
    const slot = this.slots.get(transferId);
    return slot < 0 ? -1 : this.dst[slot]!;
  }

  /** Bytes a flow has moved so far, or undefined if it is not there. */
  delivered(transferId: number): number | undefined {
    const slot = this.slots.get(transferId);
    return slot < 0 ? undefined : this.size[slot]! - this.remaining[slot]!;
  }

  /** Transfer ids of every flow into or out of `endpoint`. */
  flowsOf(endpoint: number): number[] {
    const ids: number[] = [];
    for (let slot = 0; slot < this.highWater; slot++) {
      if (this.used[slot] === 1 && (this.src[slot] === endpoint || this.dst[slot] === endpoint)) {
        ids.push(this.transferIds[slot]!);
      }
    }
    return ids;
  }

  /**
   * Moves every flow forward over [fromMs, toMs) and returns what happened, in time order (a flow's
   * 'ending' before its 'done'). Finished flows stay in the table until `remove`. The events are
   * valid until the next step.
   */
  step(fromMs: number, toMs: number): FlowEvents {
    const active = this.computeRates(fromMs, toMs);
    this.shareSpareDownload(active);
    const events = this.events;
    events.clear();
    const notice = this.endingNoticeMs;
    const span = toMs - fromMs;
    if (this.checkLinks) this.clearCarried();
    for (let i = 0; i < active; i++) {
      const slot = this.order[i]!;
      const rate = this.rate[slot]!;
      if (rate <= 0) continue;
      const begin = Math.max(fromMs, this.startAt[slot]!);
      const left = this.remaining[slot]!;
      // A flow moves for the part of the tick its weight claimed: one that runs slower than its
      // finish was foreseen at finishes in the next tick, not over its links.
      const moved = rate * this.weight[slot]! * span;
      if (notice > 0 && this.noticed[slot] === 0 && left - moved <= rate * notice) {
        this.noticed[slot] = 1;
        this.note(false, slot, begin + Math.max(0, left - rate * notice) / rate, fromMs, span);
      }
      if (moved >= left * FINISHED) {
        this.remaining[slot] = 0;
        this.note(true, slot, begin + left / rate, fromMs, span);
      } else {
        this.remaining[slot] = left - moved;
      }
      if (this.checkLinks) this.carry(slot, Math.min(moved, left));
    }
    if (this.checkLinks) this.checkCarried(span);
    events.sort();
    return events;
  }

  private clearCarried(): void {
    this.carriedUp.fill(0);
    this.carriedDown.fill(0);
    this.rackCarriedUp.fill(0);
    this.rackCarriedDown.fill(0);
  }

  private carry(slot: number, bytes: number): void {
    const s = this.src[slot]!;
    const d = this.dst[slot]!;
    this.carriedUp[s]! += bytes;
    this.carriedDown[d]! += bytes;
    if (!this.crossesRacks(s, d)) return;
    if (this.rackOf[s]! >= 0) this.rackCarriedUp[this.rackOf[s]!]! += bytes;
    if (this.rackOf[d]! >= 0) this.rackCarriedDown[this.rackOf[d]!]! += bytes;
  }

  private checkCarried(span: number): void {
    const slack = 1 + 1e-9;
    for (let e = 0; e < this.endpointCount; e++) {
      if (this.carriedUp[e]! > this.uploadBytesPerMs[e]! * span * slack)
        assert(false, `endpoint ${e} sent ${this.carriedUp[e]} bytes in a ${span} ms tick`);
      if (this.carriedDown[e]! > this.downloadBytesPerMs[e]! * span * slack)
        assert(false, `endpoint ${e} received ${this.carriedDown[e]} bytes in a ${span} ms tick`);
    }
    for (let r = 0; r < this.rackCarriedUp.length; r++) {
      const limit = this.rackUplinkBytesPerMs * span * slack;
      if (this.rackCarriedUp[r]! > limit || this.rackCarriedDown[r]! > limit)
        assert(false, `rack ${r} uplink carried more than its capacity in a ${span} ms tick`);
    }
  }

  /** The same as step(), as objects (for tests and other callers off the hot path). */
  advance(fromMs: number, toMs: number): FlowEvent[] {
    return this.step(fromMs, toMs).toArray();
  }

  private note(done: boolean, slot: number, atMs: number, fromMs: number, span: number): void {
    const id = this.transferIds[slot]!;
    const src = this.src[slot]!;
    const dst = this.dst[slot]!;
    this.events.add(done, id, atMs, (atMs - fromMs) / span, src, dst, this.size[slot]!, this.startAt[slot]!);
  }

  /**
   * Sets `rate` and `weight` of every flow that moves bytes in [fromMs, untilMs); leaves their slots,
   * grouped by sender, in `order`, and returns how many there are.
   */
  private computeRates(fromMs: number, untilMs: number): number {
    this.downWeight.fill(0);
    this.upCount.fill(0);
    if (this.racksLimit) {
      this.rackUpWeight.fill(0);
      this.rackDownWeight.fill(0);
    }
    const span = untilMs - fromMs;
    let active = 0;
    for (let slot = 0; slot < this.highWater; slot++) {
      const startAt = this.startAt[slot]!;
      if (this.used[slot] === 0 || this.remaining[slot]! <= 0 || startAt >= untilMs) {
        this.weight[slot] = 0;
        this.rate[slot] = 0;
        continue;
      }
      // The part of the tick the flow moves bytes: from its first byte, and until its last if it
      // will finish at last tick's rate (rates change little from one tick to the next).
      const movingMs = startAt > fromMs ? untilMs - startAt : span;
      const lastRate = this.rate[slot]!;
      const left = this.remaining[slot]!;
      const weight = (lastRate > 0 && left < lastRate * movingMs ? left / lastRate : movingMs) / span;
      this.weight[slot] = weight;
      active++;
      const s = this.src[slot]!;
      const d = this.dst[slot]!;
      this.upCount[s]!++;
      this.downWeight[d]! += weight;
      if (this.crossesRacks(s, d)) {
        const rs = this.rackOf[s]!;
        const rd = this.rackOf[d]!;
        if (rs >= 0) this.rackUpWeight[rs]! += weight;
        if (rd >= 0) this.rackDownWeight[rd]! += weight;
      }
    }
    this.groupBySender(active);
    this.fillAll();
    return active;
  }

  private fillAll(): void {
    for (let d = 0; d < this.endpointCount; d++) this.downShare[d] = this.downloadShare(d);
    for (let e = 0, start = 0; e < this.endpointCount; e++) {
      const end = this.upFirst[e + 1]!;
      if (end > start) this.fillShares(e, start, end);
      start = end;
    }
  }

  /** Water-fills sender e's flows (order[start..end)) with their shares downstream as caps. */
  private fillShares(e: number, start: number, end: number): void {
    for (let i = start; i < end; i++) {
      const slot = this.order[i]!;
      const share = this.downShare[this.dst[slot]!]!;
      this.rate[slot] = this.racksLimit ? Math.min(share, this.rackShare(slot)) : share;
    }
    this.waterFill(e, start, end);
  }

  /**
   * One round of max-min fairness on the download side: a receiver whose flows leave part of its
   * link unused (some are held back by their senders, as a flow from the busy origin is) offers the
   * rest to its flows that got their full share, the others keep their rate as a cap, and their
   * senders water-fill again (those with room to give: a full sender's rates cannot change). No
   * link carries more than its capacity.
   */
  private shareSpareDownload(active: number): void {
    const used = this.downUsed;
    const fullWeight = this.downFullWeight;
    const share = this.downShare;
    used.fill(0);
    fullWeight.fill(0);
    for (let i = 0; i < active; i++) {
      const slot = this.order[i]!;
      const d = this.dst[slot]!;
      const weight = this.weight[slot]!;
      used[d]! += this.rate[slot]! * weight;
      if (this.rate[slot]! >= share[d]! * FULL_SHARE) fullWeight[d]! += weight;
    }
    // From here on `used` holds the extra rate each receiver offers per unit of full-share weight.
    let anySpare = false;
    for (let d = 0; d < this.endpointCount; d++) {
      const link = this.downloadBytesPerMs[d]!;
      const spare = link - used[d]!;
      used[d] = spare > link * SPARE_MIN && fullWeight[d]! > 0 ? spare / fullWeight[d]! : 0;
      anySpare ||= used[d]! > 0;
    }
    if (!anySpare) return;
    for (let e = 0, start = 0; e < this.endpointCount; e++) {
      const end = this.upFirst[e + 1]!;
      if (end > start && this.mayRaise(e, start, end)) {
        for (let i = start; i < end; i++) {
          const slot = this.order[i]!;
          const d = this.dst[slot]!;
          if (used[d] === 0 || this.rate[slot]! < share[d]! * FULL_SHARE) continue;
          const cap = Math.min(share[d]! + used[d]!, this.downloadBytesPerMs[d]!);
          this.rate[slot] = Math.min(cap, this.rackShare(slot));
        }
        this.waterFill(e, start, end);
      }
      start = end;
    }
  }

  /** Sender e has room on its link and a flow that got its full share into a receiver with room. */
  private mayRaise(e: number, start: number, end: number): boolean {
    let sent = 0;
    let raise = false;
    for (let i = start; i < end; i++) {
      const slot = this.order[i]!;
      const d = this.dst[slot]!;
      sent += this.rate[slot]! * this.weight[slot]!;
      raise ||= this.downUsed[d]! > 0 && this.rate[slot]! >= this.downShare[d]! * FULL_SHARE;
    }
    return raise && sent < this.uploadBytesPerMs[e]! * FULL_SHARE;
  }

  /** Counting sort of active slots by sender into `order`; `upFirst[e]..upFirst[e+1]` are e's flows. */
  private groupBySender(active: number): void {
    if (this.order.length < active) this.order = new Int32Array(this.capacity);
    let offset = 0;
    for (let e = 0; e < this.endpointCount; e++) {
      this.upFirst[e] = offset;
      offset += this.upCount[e]!;
    }
    this.upFirst[this.endpointCount] = offset;
    const cursor = this.cursor;
    cursor.set(this.upFirst.subarray(0, this.endpointCount));
    for (let slot = 0; slot < this.highWater; slot++) {
      if (this.weight[slot] === 0) continue;
      const s = this.src[slot]!;
      this.order[cursor[s]!] = slot;
      cursor[s]!++;
    }
  }

  /**
   * Splits sender e's upload over its flows, each capped by the rate it holds on entry (its share
   * of the links downstream): the smallest caps are met first and what is left is shared equally
   * by the rest. A flow active for part of the tick uses its rate only for that part, so it counts
   * with its weight.
   */
  private waterFill(e: number, start: number, end: number): void {
    const link = this.uploadBytesPerMs[e]!;
    let capacity = link;
    let weightLeft = 0;
    for (let i = start; i < end; i++) weightLeft += this.weight[this.order[i]!]!;
    // Few flows per sender: an insertion sort by cap, in place, with no allocation.
    for (let i = start + 1; i < end; i++) {
      const slot = this.order[i]!;
      const cap = this.rate[slot]!;
      let j = i - 1;
      while (j >= start && this.rate[this.order[j]!]! > cap) {
        this.order[j + 1] = this.order[j]!;
        j--;
      }
      this.order[j + 1] = slot;
    }
    for (let i = start; i < end; i++) {
      const slot = this.order[i]!;
      const weight = this.weight[slot]!;
      // What is left shared by the weight left; no flow runs faster than the link itself. The
      // weight left is a running difference: rounding must not let it fall below this flow's own
      // weight (a flow that moves for a sliver of the tick would get a rate without bound).
      const fair = capacity > 0 ? Math.min(capacity / Math.max(weightLeft, weight), link) : 0;
      const cap = this.rate[slot]!;
      const given = cap < fair ? cap : fair;
      this.rate[slot] = given;
      capacity = Math.max(0, capacity - given * weight);
      weightLeft -= weight;
    }
  }

  private downloadShare(d: number): number {
    return weightedShare(this.downloadBytesPerMs[d]!, this.downWeight[d]!);
  }

  /** A flow's share of the rack uplinks it crosses (unlimited within a rack or without racks). */
  private rackShare(slot: number): number {
    const s = this.src[slot]!;
    const d = this.dst[slot]!;
    if (!this.crossesRacks(s, d)) return Number.POSITIVE_INFINITY;
    const rs = this.rackOf[s]!;
    const rd = this.rackOf[d]!;
    const uplink = this.rackUplinkBytesPerMs;
    let share = Number.POSITIVE_INFINITY;
    if (rs >= 0) share = weightedShare(uplink, this.rackUpWeight[rs]!);
    if (rd >= 0) share = Math.min(share, weightedShare(uplink, this.rackDownWeight[rd]!));
    return share;
  }

  private crossesRacks(s: number, d: number): boolean {
    return this.racksLimit && this.rackOf[s] !== this.rackOf[d];
  }

  private grow(): number {
    if (this.highWater < this.capacity) return this.highWater++;
    const capacity = this.capacity * 2;
    this.src = grown(this.src, new Int32Array(capacity));
    this.dst = grown(this.dst, new Int32Array(capacity));
    this.transferIds = grown(this.transferIds, new Float64Array(capacity));
    this.size = grown(this.size, new Float64Array(capacity));
    this.remaining = grown(this.remaining, new Float64Array(capacity));
    this.startAt = grown(this.startAt, new Float64Array(capacity));
    this.rate = grown(this.rate, new Float64Array(capacity));
    this.weight = grown(this.weight, new Float64Array(capacity));
    this.used = grown(this.used, new Uint8Array(capacity));
    this.noticed = grown(this.noticed, new Uint8Array(capacity));
    this.order = new Int32Array(capacity);
    this.capacity = capacity;
    return this.highWater++;
  }
}

/**
 * One flow's rate on a link of `capacity` whose flows' weights sum to `weight`: an equal share of
 * the capacity over the tick, but never more than the link itself can carry.
 */
function weightedShare(capacity: number, weight: number): number {
  return weight > 1 ? capacity / weight : capacity;
}

function grown<T extends Int32Array | Float64Array | Uint8Array>(old: T, next: T): T {
  next.set(old);
  return next;
}
