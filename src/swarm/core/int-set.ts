/**
 * A set of small non-negative integers (host ids) with O(1) add, delete, membership and uniform
 * random pick: a dense array of members plus each member's index in it. The core keeps its work
 * queues (hosts to re-plan, parked hosts, parents with free upload slots) in these, so a host is
 * never queued twice and a queue never grows past the number of hosts.
 */

import type { Random } from './random.js';

export class IntSet {
  private members: Int32Array;
  /** index[value] is the member's position, or -1. */
  private index: Int32Array;
  private count = 0;

  constructor(capacity: number) {
    this.members = new Int32Array(Math.max(capacity, 1));
    this.index = new Int32Array(Math.max(capacity, 1)).fill(-1);
  }

  get size(): number {
    return this.count;
  }

  has(value: number): boolean {
    return value < this.index.length && this.index[value]! >= 0;
  }

  /** The member at `position` (0 <= position < size); order changes when members are deleted. */
  at(position: number): number {
    return this.members[position]!;
  }

  add(value: number): void {
    if (value >= this.index.length) this.grow(value + 1);
    if (this.index[value]! >= 0) return;
    this.members[this.count] = value;
    this.index[value] = this.count;
    this.count++;
  }

  delete(value: number): void {
    if (value >= this.index.length) return;
    const position = this.index[value]!;
    if (position < 0) return;
    const last = this.members[--this.count]!;
    this.members[position] = last;
    this.index[last] = position;
    this.index[value] = -1;
  }

  random(random: Random): number {
    return this.members[random.below(this.count)]!;
  }

  /** Removes and returns the most recently placed member (size must be > 0). */
  pop(): number {
    const last = this.members[this.count - 1]!;
    this.delete(last);
    return last;
  }

  clear(): void {
    for (let i = 0; i < this.count; i++) this.index[this.members[i]!] = -1;
    this.count = 0;
  }

  private grow(needed: number): void {
    const capacity = Math.max(needed, this.index.length * 2);
    const members = new Int32Array(capacity);
    members.set(this.members.subarray(0, this.count));
    const index = new Int32Array(capacity).fill(-1);
    index.set(this.index);
    this.members = members;
    this.index = index;
  }
}
