/**
 * The table of transfers in flight. A transfer lives in a slot of parallel typed arrays (host,
 * piece, parent, flags) and is threaded on two intrusive doubly linked lists: its host's downloads
 * and its parent's uploads (origin transfers are on no upload list). So starting, finishing, and
 * listing a host's transfers cost O(1) per transfer, with no object per transfer.
 *
 * Transfer ids are `generation * SLOTS_MAX + slot`: a report that names a slot reused since (a
 * transfer dropped by removeHost and then reported anyway) does not match and is ignored.
 *
 * A transfer the shell says is ending (its last bytes are on their way) stays on both lists until it
 * finishes but no longer counts in its host's `downloads` or its parent's `uploads`, the counts the
 * slot limits read; `endingDownloads` counts it instead.
 */

import { assert } from '../../errors.js';

/** At most this many transfers in flight at once (a limit, and the id's slot field). */
export const TRANSFERS_IN_FLIGHT_MAX = 1 << 21;

const NONE = -1;
const FLAG_ACTIVE = 1;
const FLAG_HEDGE = 2;
const FLAG_CANCELLED = 4;
const FLAG_ENDING = 8;

export class TransferTable {
  host = new Int32Array(0);
  piece = new Int32Array(0);
  from = new Int32Array(0);
  private flags = new Uint8Array(0);
  private generation = new Uint32Array(0);
  private nextDown = new Int32Array(0);
  private prevDown = new Int32Array(0);
  private nextUp = new Int32Array(0);
  private prevUp = new Int32Array(0);
  private freeSlots = new Int32Array(0);
  private freeCount = 0;
  private capacity = 0;
  private active = 0;

  /** Per host: first and last download, first upload; downloads and uploads in flight. */
  private headDown = new Int32Array(0);
  private tailDown = new Int32Array(0);
  private headUp = new Int32Array(0);
  downloads = new Int32Array(0);
  uploads = new Int32Array(0);
  endingDownloads = new Int32Array(0);

  constructor(initialCapacity: number) {
    this.growSlots(Math.max(16, initialCapacity));
  }

  get inFlight(): number {
    return this.active;
  }

  /** Makes room for host ids below `hostCount`. */
  ensureHosts(hostCount: number): void {
    if (hostCount <= this.headDown.length) return;
    const size = Math.max(hostCount, this.headDown.length * 2);
    this.headDown = grownInt32(this.headDown, size, NONE);
    this.tailDown = grownInt32(this.tailDown, size, NONE);
    this.headUp = grownInt32(this.headUp, size, NONE);
    this.downloads = grownInt32(this.downloads, size, 0);
    this.uploads = grownInt32(this.uploads, size, 0);
    this.endingDownloads = grownInt32(this.endingDownloads, size, 0);
  }

  /** Starts a transfer and returns its slot. `from` is a host id or a negative id (the origin). */
  start(host: number, piece: number, from: number, hedge: boolean): number {
    if (this.freeCount === 0) this.growSlots(this.capacity * 2);
    const slot = this.freeSlots[--this.freeCount]!;
    this.host[slot] = host;
    this.piece[slot] = piece;
    this.from[slot] = from;
    this.flags[slot] = hedge ? FLAG_ACTIVE | FLAG_HEDGE : FLAG_ACTIVE;
    this.linkDown(slot, host);
    if (from >= 0) this.linkUp(slot, from);
    this.active++;
    return slot;
  }

  /** Ends a transfer: unlinks it and frees its slot for reuse under a new generation. */
  finish(slot: number): void {
    if (!this.isActive(slot)) assert(false, `transfer slot ${slot} finished twice`);
    this.unlinkDown(slot, this.host[slot]!);
    const from = this.from[slot]!;
    if (from >= 0) this.unlinkUp(slot, from);
    this.flags[slot] = 0;
    this.generation[slot] = (this.generation[slot]! + 1) >>> 0;
    this.freeSlots[this.freeCount++] = slot;
    this.active--;
  }

  idOf(slot: number): number {
    return this.generation[slot]! * TRANSFERS_IN_FLIGHT_MAX + slot;
  }

  /** The slot of an active transfer id, or -1 for an id that is unknown, finished or reused. */
  slotOf(transferId: number): number {
    if (!Number.isSafeInteger(transferId) || transferId < 0) return NONE;
    // Not `%`: on numbers past 2^31 it is a floating-point remainder, many times slower.
    const slot = transferId - Math.floor(transferId / TRANSFERS_IN_FLIGHT_MAX) * TRANSFERS_IN_FLIGHT_MAX;
    if (slot >= this.capacity || !this.isActive(slot)) return NONE;
    return this.idOf(slot) === transferId ? slot : NONE;
  }

  isActive(slot: number): boolean {
    return (this.flags[slot]! & FLAG_ACTIVE) !== 0;
  }

  isHedge(slot: number): boolean {
    return (this.flags[slot]! & FLAG_HEDGE) !== 0;
  }

  isCancelled(slot: number): boolean {
    return (this.flags[slot]! & FLAG_CANCELLED) !== 0;
  }

  markCancelled(slot: number): void {
    this.flags[slot]! |= FLAG_CANCELLED;
  }

  isEnding(slot: number): boolean {
    return (this.flags[slot]! & FLAG_ENDING) !== 0;
  }

  /** The transfer's slots on both ends are free for planning; it stays listed until it finishes. */
  markEnding(slot: number): void {
    if (!this.isActive(slot) || this.isEnding(slot)) assert(false, `transfer slot ${slot} cannot end`);
    this.flags[slot]! |= FLAG_ENDING;
    const host = this.host[slot]!;
    this.downloads[host]!--;
    this.endingDownloads[host]!++;
    const from = this.from[slot]!;
    if (from >= 0) this.uploads[from]!--;
  }

  /** A host's downloads, oldest first: firstDownload, then nextDownload until -1. */
  firstDownload(host: number): number {
    return this.headDown[host]!;
  }

  nextDownload(slot: number): number {
    return this.nextDown[slot]!;
  }

  firstUpload(host: number): number {
    return this.headUp[host]!;
  }

  nextUpload(slot: number): number {
    return this.nextUp[slot]!;
  }

  private linkDown(slot: number, host: number): void {
    const tail = this.tailDown[host]!;
    this.prevDown[slot] = tail;
    this.nextDown[slot] = NONE;
    if (tail === NONE) this.headDown[host] = slot;
    else this.nextDown[tail] = slot;
    this.tailDown[host] = slot;
    this.downloads[host]!++;
  }

  private unlinkDown(slot: number, host: number): void {
    const prev = this.prevDown[slot]!;
    const next = this.nextDown[slot]!;
    if (prev === NONE) this.headDown[host] = next;
    else this.nextDown[prev] = next;
    if (next === NONE) this.tailDown[host] = prev;
    else this.prevDown[next] = prev;
    if (this.isEnding(slot)) this.endingDownloads[host]!--;
    else this.downloads[host]!--;
  }

  private linkUp(slot: number, from: number): void {
    const head = this.headUp[from]!;
    this.prevUp[slot] = NONE;
    this.nextUp[slot] = head;
    if (head !== NONE) this.prevUp[head] = slot;
    this.headUp[from] = slot;
    this.uploads[from]!++;
  }

  private unlinkUp(slot: number, from: number): void {
    const prev = this.prevUp[slot]!;
    const next = this.nextUp[slot]!;
    if (prev === NONE) this.headUp[from] = next;
    else this.nextUp[prev] = next;
    if (next !== NONE) this.prevUp[next] = prev;
    if (!this.isEnding(slot)) this.uploads[from]!--;
  }

  private growSlots(capacity: number): void {
    assert(capacity <= TRANSFERS_IN_FLIGHT_MAX, `more than ${TRANSFERS_IN_FLIGHT_MAX} transfers in flight`);
    const old = this.capacity;
    this.host = grownInt32(this.host, capacity, NONE);
    this.piece = grownInt32(this.piece, capacity, NONE);
    this.from = grownInt32(this.from, capacity, NONE);
    this.nextDown = grownInt32(this.nextDown, capacity, NONE);
    this.prevDown = grownInt32(this.prevDown, capacity, NONE);
    this.nextUp = grownInt32(this.nextUp, capacity, NONE);
    this.prevUp = grownInt32(this.prevUp, capacity, NONE);
    const flags = new Uint8Array(capacity);
    flags.set(this.flags);
    this.flags = flags;
    const generation = new Uint32Array(capacity);
    generation.set(this.generation);
    this.generation = generation;
    // Free slots are handed out from the top of the stack: push the new ones so the lowest comes first.
    const freeSlots = new Int32Array(capacity);
    freeSlots.set(this.freeSlots.subarray(0, this.freeCount));
    let freeCount = this.freeCount;
    for (let slot = capacity - 1; slot >= old; slot--) freeSlots[freeCount++] = slot;
    this.freeSlots = freeSlots;
    this.freeCount = freeCount;
    this.capacity = capacity;
  }
}

function grownInt32(array: Int32Array, size: number, fill: number): Int32Array<ArrayBuffer> {
  const grown = new Int32Array(size).fill(fill);
  grown.set(array);
  return grown;
}
