/**
 * A fluid model of the network for the simulator: every transfer is a flow whose rate is set by the
 * links it crosses, and time advances in small fixed ticks. Within a tick rates are constant; a flow
 * that finishes mid-tick reports its exact finish time, so the next transfer can start then.
 *
 * Rates: a host's download link is shared equally by the flows into it; each upload link's capacity
 * (the origin's included) is water-filled over its flows, each capped by its share of the receiving
 * host's download link and, across racks, by its share of the rack uplinks. This is max-min fair
 * from the sender's side and cheap: O(flows) per tick. Pure: no clock, no randomness.
 */

import { assert } from '../errors.js';

export interface Endpoint {
  uploadBytesPerMs: number;
  downloadBytesPerMs: number;
  /** Rack index, or -1 for none (the origin sits outside every rack). */
  rack: number;
}

export interface Completion {
  transferId: number;
  atMs: number;
  src: number;
  dst: number;
  bytes: number;
  /** When the flow's first byte could move (after its request latency). */
  startAtMs: number;
}

const INITIAL_FLOWS = 1024;

export class FluidNetwork {
  private readonly endpoints: readonly Endpoint[];
  private readonly rackUplinkBytesPerMs: number;
  private readonly rackCount: number;
  private capacity = INITIAL_FLOWS;
  private src = new Int32Array(INITIAL_FLOWS);
  private dst = new Int32Array(INITIAL_FLOWS);
  private transferIds = new Int32Array(INITIAL_FLOWS);
  private size = new Float64Array(INITIAL_FLOWS);
  private remaining = new Float64Array(INITIAL_FLOWS);
  private startAt = new Float64Array(INITIAL_FLOWS);
  private rate = new Float64Array(INITIAL_FLOWS);
  private used = new Uint8Array(INITIAL_FLOWS);
  private readonly free: number[] = [];
  private highWater = 0;
  private readonly slotOf = new Map<number, number>();
  // Scratch per endpoint and per rack, reused every tick.
  private readonly downCount: Int32Array;
  private readonly upCount: Int32Array;
  private readonly upFirst: Int32Array;
  private readonly cursor: Int32Array;
  private readonly rackUpCount: Int32Array;
  private readonly rackDownCount: Int32Array;
  private order = new Int32Array(INITIAL_FLOWS);

  /** `rackUplinkBytesPerMs` 0 means racks are not a constraint. */
  constructor(endpoints: readonly Endpoint[], rackCount: number, rackUplinkBytesPerMs: number) {
    this.endpoints = endpoints;
    this.rackCount = rackCount;
    this.rackUplinkBytesPerMs = rackUplinkBytesPerMs;
    this.downCount = new Int32Array(endpoints.length);
    this.upCount = new Int32Array(endpoints.length);
    this.upFirst = new Int32Array(endpoints.length + 1);
    this.cursor = new Int32Array(endpoints.length);
    this.rackUpCount = new Int32Array(Math.max(1, rackCount));
    this.rackDownCount = new Int32Array(Math.max(1, rackCount));
  }

  get flowCount(): number {
    return this.slotOf.size;
  }

  add(transferId: number, src: number, dst: number, bytes: number, startAtMs: number): void {
    assert(!this.slotOf.has(transferId), `transfer ${transferId} added twice`);
    const slot = this.free.pop() ?? this.grow();
    this.src[slot] = src;
    this.dst[slot] = dst;
    this.transferIds[slot] = transferId;
    this.size[slot] = bytes;
    this.remaining[slot] = bytes;
    this.startAt[slot] = startAtMs;
    this.rate[slot] = 0;
    this.used[slot] = 1;
    this.slotOf.set(transferId, slot);
  }

  /** Removes a flow; returns its sender and the bytes it had delivered, or undefined if it was not there. */
  remove(transferId: number): { src: number; delivered: number } | undefined {
    const slot = this.slotOf.get(transferId);
    if (slot === undefined) return undefined;
    this.slotOf.delete(transferId);
    this.used[slot] = 0;
    this.free.push(slot);
    return {
      src: this.src[slot] as number,
      delivered: (this.size[slot] as number) - (this.remaining[slot] as number),
    };
  }

  /** Transfer ids of every flow into or out of `endpoint`. */
  flowsOf(endpoint: number): number[] {
    const ids: number[] = [];
    for (let slot = 0; slot < this.highWater; slot++) {
      if (this.used[slot] === 1 && (this.src[slot] === endpoint || this.dst[slot] === endpoint)) {
        ids.push(this.transferIds[slot] as number);
      }
    }
    return ids;
  }

  /**
   * Moves every flow forward over [fromMs, toMs) and returns the flows that finished, in time order
   * (ties by transfer id). Finished flows stay in the table until `remove`.
   */
  advance(fromMs: number, toMs: number): Completion[] {
    const active = this.computeRates(toMs);
    const done: Completion[] = [];
    for (let i = 0; i < active; i++) {
      const slot = this.order[i] as number;
      const begin = Math.max(fromMs, this.startAt[slot] as number);
      const rate = this.rate[slot] as number;
      if (rate <= 0 || begin >= toMs) continue;
      const left = this.remaining[slot] as number;
      const moved = rate * (toMs - begin);
      if (moved >= left) {
        this.remaining[slot] = 0;
        done.push({
          transferId: this.transferIds[slot] as number,
          atMs: begin + left / rate,
          src: this.src[slot] as number,
          dst: this.dst[slot] as number,
          bytes: this.size[slot] as number,
          startAtMs: this.startAt[slot] as number,
        });
      } else {
        this.remaining[slot] = left - moved;
      }
    }
    return done.sort((a, b) => a.atMs - b.atMs || a.transferId - b.transferId);
  }

  /** Sets `rate` of every flow active before `untilMs`; leaves their slots, grouped by sender, in `order`. */
  private computeRates(untilMs: number): number {
    this.downCount.fill(0);
    this.upCount.fill(0);
    this.rackUpCount.fill(0);
    this.rackDownCount.fill(0);
    let active = 0;
    for (let slot = 0; slot < this.highWater; slot++) {
      if (
        this.used[slot] === 0 ||
        (this.remaining[slot] as number) <= 0 ||
        (this.startAt[slot] as number) >= untilMs
      ) {
        this.rate[slot] = 0;
        continue;
      }
      active++;
      const s = this.src[slot] as number;
      const d = this.dst[slot] as number;
      this.upCount[s] = (this.upCount[s] as number) + 1;
      this.downCount[d] = (this.downCount[d] as number) + 1;
      if (this.crossesRacks(s, d)) {
        const rs = (this.endpoints[s] as Endpoint).rack;
        const rd = (this.endpoints[d] as Endpoint).rack;
        if (rs >= 0) this.rackUpCount[rs] = (this.rackUpCount[rs] as number) + 1;
        if (rd >= 0) this.rackDownCount[rd] = (this.rackDownCount[rd] as number) + 1;
      }
    }
    this.groupBySender(active, untilMs);
    for (let e = 0, start = 0; e < this.endpoints.length; e++) {
      const end = this.upFirst[e + 1] as number;
      if (end > start) this.waterFill(e, start, end);
      start = end;
    }
    return active;
  }

  /** Counting sort of active slots by sender into `order`; `upFirst[e]..upFirst[e+1]` are e's flows. */
  private groupBySender(active: number, untilMs: number): void {
    if (this.order.length < active) this.order = new Int32Array(this.capacity);
    let offset = 0;
    for (let e = 0; e < this.endpoints.length; e++) {
      this.upFirst[e] = offset;
      offset += this.upCount[e] as number;
    }
    this.upFirst[this.endpoints.length] = offset;
    const cursor = this.cursor;
    cursor.set(this.upFirst.subarray(0, this.endpoints.length));
    for (let slot = 0; slot < this.highWater; slot++) {
      if (
        this.used[slot] === 0 ||
        (this.remaining[slot] as number) <= 0 ||
        (this.startAt[slot] as number) >= untilMs
      )
        continue;
      const s = this.src[slot] as number;
      this.order[cursor[s] as number] = slot;
      cursor[s] = (cursor[s] as number) + 1;
    }
  }

  /** Splits sender e's upload over its flows, each capped by its share of the links downstream. */
  private waterFill(e: number, start: number, end: number): void {
    let capacity = (this.endpoints[e] as Endpoint).uploadBytesPerMs;
    for (let i = start; i < end; i++) {
      const slot = this.order[i] as number;
      this.rate[slot] = this.downstreamShare(slot);
    }
    // Sort this sender's slots by cap, in place (few flows per sender: insertion sort, no allocation),
    // then satisfy the smallest caps first and share what is left equally among the rest.
    for (let i = start + 1; i < end; i++) {
      const slot = this.order[i] as number;
      const cap = this.rate[slot] as number;
      let j = i - 1;
      while (j >= start && (this.rate[this.order[j] as number] as number) > cap) {
        this.order[j + 1] = this.order[j] as number;
        j--;
      }
      this.order[j + 1] = slot;
    }
    for (let i = start; i < end; i++) {
      const slot = this.order[i] as number;
      const fair = capacity / (end - i);
      const cap = this.rate[slot] as number;
      const given = cap < fair ? cap : fair;
      this.rate[slot] = given;
      capacity -= given;
    }
  }

  private downstreamShare(slot: number): number {
    const s = this.src[slot] as number;
    const d = this.dst[slot] as number;
    const receiver = this.endpoints[d] as Endpoint;
    let share = receiver.downloadBytesPerMs / (this.downCount[d] as number);
    if (this.crossesRacks(s, d)) {
      const rs = (this.endpoints[s] as Endpoint).rack;
      if (rs >= 0) share = Math.min(share, this.rackUplinkBytesPerMs / (this.rackUpCount[rs] as number));
      if (receiver.rack >= 0)
        share = Math.min(share, this.rackUplinkBytesPerMs / (this.rackDownCount[receiver.rack] as number));
    }
    return share;
  }

  private crossesRacks(s: number, d: number): boolean {
    if (this.rackUplinkBytesPerMs <= 0 || this.rackCount === 0) return false;
    return (this.endpoints[s] as Endpoint).rack !== (this.endpoints[d] as Endpoint).rack;
  }

  private grow(): number {
    if (this.highWater < this.capacity) return this.highWater++;
    const capacity = this.capacity * 2;
    const grow64 = (old: Float64Array): Float64Array<ArrayBuffer> => {
      const next = new Float64Array(capacity);
      next.set(old);
      return next;
    };
    const grow32 = (old: Int32Array): Int32Array<ArrayBuffer> => {
      const next = new Int32Array(capacity);
      next.set(old);
      return next;
    };
    this.src = grow32(this.src);
    this.dst = grow32(this.dst);
    this.transferIds = grow32(this.transferIds);
    this.size = grow64(this.size);
    this.remaining = grow64(this.remaining);
    this.startAt = grow64(this.startAt);
    this.rate = grow64(this.rate);
    const used = new Uint8Array(capacity);
    used.set(this.used);
    this.used = used;
    this.order = new Int32Array(capacity);
    this.capacity = capacity;
    return this.highWater++;
  }
}
