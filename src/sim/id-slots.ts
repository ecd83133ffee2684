/**
 * A map from transfer ids (non-negative safe integers, often above 2^31) to small slot numbers:
 * open addressing with linear probing in two typed arrays, and backward-shift deletion so no
 * tombstones pile up. The simulator looks a flow up for every completion and cancellation; a `Map`
 * keyed by numbers above 2^31 boxes every key, which made those look-ups a tenth of a large run.
 */

import { assert } from '../errors.js';

const EMPTY = -1;
const TWO_TO_32 = 4294967296;

export class IdSlots {
  private keys: Float64Array;
  private values: Int32Array;
  private mask: number;
  private shift: number;
  private count = 0;

  constructor(capacity = 1024) {
    let bits = 4;
    while (1 << bits < capacity * 2) bits++;
    this.mask = (1 << bits) - 1;
    this.shift = 32 - bits;
    this.keys = new Float64Array(1 << bits).fill(EMPTY);
    this.values = new Int32Array(1 << bits);
  }

  get size(): number {
    return this.count;
  }

  /** The slot stored for `id`, or -1. */
  get(id: number): number {
    for (let i = this.home(id); ; i = (i + 1) & this.mask) {
      const key = this.keys[i]!;
      if (key === id) return this.values[i]!;
      if (key === EMPTY) return EMPTY;
    }
  }

  has(id: number): boolean {
    return this.get(id) !== EMPTY;
  }

  /** Stores `slot` for `id`, which must not be present. */
  set(id: number, slot: number): void {
    if (!Number.isSafeInteger(id) || id < 0)
      assert(false, `transfer id ${id} is not a non-negative safe integer`);
    if (2 * (this.count + 1) > this.keys.length) this.grow();
    let i = this.home(id);
    while (this.keys[i] !== EMPTY) {
      if (this.keys[i] === id) assert(false, `transfer id ${id} is already present`);
      i = (i + 1) & this.mask;
    }
    this.keys[i] = id;
    this.values[i] = slot;
    this.count++;
  }

  /** Removes `id`; returns its slot, or -1 when it was not present. */
  delete(id: number): number {
    let i = this.home(id);
    for (; ; i = (i + 1) & this.mask) {
      const key = this.keys[i]!;
      if (key === EMPTY) return EMPTY;
      if (key === id) break;
    }
    const slot = this.values[i]!;
    this.count--;
    // Backward-shift: move later entries of the probe run into the hole when their home allows it.
    for (let hole = i, j = (i + 1) & this.mask; ; j = (j + 1) & this.mask) {
      const key = this.keys[j]!;
      if (key === EMPTY) {
        this.keys[hole] = EMPTY;
        return slot;
      }
      const home = this.home(key);
      // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
      const stays = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (!stays) {
        this.keys[hole] = key;
        this.values[hole] = this.values[j]!;
        hole = j;
      }
    }
  }

  private home(id: number): number {
    const low = id >>> 0;
    const high = (id / TWO_TO_32) | 0;
    return Math.imul(low ^ Math.imul(high, 0x27d4eb2d), 0x9e3779b1) >>> this.shift;
  }

  private grow(): void {
    const keys = this.keys;
    const values = this.values;
    const size = keys.length * 2;
    this.keys = new Float64Array(size).fill(EMPTY);
    this.values = new Int32Array(size);
    this.mask = size - 1;
    this.shift--;
    this.count = 0;
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!;
      if (key === EMPTY) continue;
      let j = this.home(key);
      while (this.keys[j] !== EMPTY) j = (j + 1) & this.mask;
      this.keys[j] = key;
      this.values[j] = values[i]!;
      this.count++;
    }
  }
}
