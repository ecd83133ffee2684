/**
 * The events of one network tick ('ending' and 'done', see network.ts) in parallel typed arrays, so
 * a tick with a thousand events allocates nothing. Each event is also noted as one number: its
 * time within the tick in 31 bits, then its index in 21 bits, so one native numeric sort orders the
 * events by time (ties in the order they were added) with no comparator call.
 */

import { assert } from '../errors.js';

/** One event as a plain object, for callers that are not on a hot path. */
export interface FlowEvent {
  /** 'done': the flow moved its last byte at `atMs`; 'ending': from `atMs` it has the notice left. */
  kind: 'done' | 'ending';
  transferId: number;
  atMs: number;
  src: number;
  dst: number;
  bytes: number;
  /** When the flow's first byte could move (after its request latency). */
  startAtMs: number;
}

/** Keys: 2^31 time steps per tick times 2^21 events, below 2^53 so every key is exact. */
const TIME_STEPS = 2 ** 31;
const EVENTS_MAX = 2 ** 21;

export class FlowEvents {
  /** Events added since the last clear(); after sort(), read them by position 0 .. length - 1. */
  length = 0;
  private keys = new Float64Array(256);
  private ids = new Float64Array(256);
  private times = new Float64Array(256);
  private starts = new Float64Array(256);
  private sizes = new Float64Array(256);
  private srcs = new Int32Array(256);
  private dsts = new Int32Array(256);
  private done = new Uint8Array(256);
  private order = new Int32Array(256);

  clear(): void {
    this.length = 0;
  }

  /** Adds an event at `atMs`, `fraction` of the way through the tick (0..1). */
  add(
    done: boolean,
    transferId: number,
    atMs: number,
    fraction: number,
    src: number,
    dst: number,
    bytes: number,
    startAtMs: number,
  ): void {
    const i = this.length;
    if (i === EVENTS_MAX) assert(false, `more than ${EVENTS_MAX} flow events in a tick`);
    if (i === this.keys.length) this.grow();
    const time = Math.min(Math.floor(Math.min(Math.max(fraction, 0), 1) * TIME_STEPS), TIME_STEPS - 1);
    this.keys[i] = time * EVENTS_MAX + i;
    this.ids[i] = transferId;
    this.times[i] = atMs;
    this.starts[i] = startAtMs;
    this.sizes[i] = bytes;
    this.srcs[i] = src;
    this.dsts[i] = dst;
    this.done[i] = done ? 1 : 0;
    this.length = i + 1;
  }

  /** Orders the events by time. */
  sort(): void {
    const keys = this.keys.subarray(0, this.length).sort();
    // The low 21 bits without `%`, a floating-point remainder on numbers this large.
    for (let i = 0; i < this.length; i++) {
      const key = keys[i]!;
      this.order[i] = key - Math.floor(key / EVENTS_MAX) * EVENTS_MAX;
    }
  }

  isDone(position: number): boolean {
    return this.done[this.order[position]!] === 1;
  }

  transferId(position: number): number {
    return this.ids[this.order[position]!]!;
  }

  atMs(position: number): number {
    return this.times[this.order[position]!]!;
  }

  src(position: number): number {
    return this.srcs[this.order[position]!]!;
  }

  dst(position: number): number {
    return this.dsts[this.order[position]!]!;
  }

  bytes(position: number): number {
    return this.sizes[this.order[position]!]!;
  }

  startAtMs(position: number): number {
    return this.starts[this.order[position]!]!;
  }

  toArray(): FlowEvent[] {
    const events: FlowEvent[] = [];
    for (let i = 0; i < this.length; i++) {
      events.push({
        kind: this.isDone(i) ? 'done' : 'ending',
        transferId: this.transferId(i),
        atMs: this.atMs(i),
        src: this.src(i),
        dst: this.dst(i),
        bytes: this.bytes(i),
        startAtMs: this.startAtMs(i),
      });
    }
    return events;
  }

  private grow(): void {
    const size = this.keys.length * 2;
    this.keys = grown(this.keys, new Float64Array(size));
    this.ids = grown(this.ids, new Float64Array(size));
    this.times = grown(this.times, new Float64Array(size));
    this.starts = grown(this.starts, new Float64Array(size));
    this.sizes = grown(this.sizes, new Float64Array(size));
    this.srcs = grown(this.srcs, new Int32Array(size));
    this.dsts = grown(this.dsts, new Int32Array(size));
    this.done = grown(this.done, new Uint8Array(size));
    this.order = new Int32Array(size);
  }
}

function grown<T extends Int32Array | Float64Array | Uint8Array>(old: T, next: T): T {
  next.set(old);
  return next;
}
