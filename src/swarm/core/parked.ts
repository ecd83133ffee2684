/**
 * Parked hosts: hosts with a free download slot whose last search found nothing to fetch. They wait
 * for a parent to offer them something. The set is also kept per rack and per zone, so a parent
 * offers to waiting hosts near it first (its rack, then its zone, then anyone) in O(1) per pick.
 */

import { IntSet } from './int-set.js';
import type { Random } from './random.js';

export class ParkedHosts {
  readonly all = new IntSet(64);
  private readonly byRack: IntSet[] = [];
  private readonly byZone: IntSet[] = [];
  private rackOf = new Int32Array(0);
  private zoneOf = new Int32Array(0);

  get size(): number {
    return this.all.size;
  }

  /** Records the labels of `host` (-1 when it has none) before it is first parked. */
  setLabels(host: number, rack: number, zone: number): void {
    if (host >= this.rackOf.length) {
      const size = Math.max(host + 1, this.rackOf.length * 2);
      const rackOf = new Int32Array(size).fill(-1);
      rackOf.set(this.rackOf);
      const zoneOf = new Int32Array(size).fill(-1);
      zoneOf.set(this.zoneOf);
      this.rackOf = rackOf;
      this.zoneOf = zoneOf;
    }
    this.delete(host);
    this.rackOf[host] = rack;
    this.zoneOf[host] = zone;
  }

  has(host: number): boolean {
    return this.all.has(host);
  }

  add(host: number): void {
    if (this.all.has(host)) return;
    this.all.add(host);
    const rack = this.rackOf[host]!;
    const zone = this.zoneOf[host]!;
    if (rack >= 0) (this.byRack[rack] ??= new IntSet(16)).add(host);
    if (zone >= 0) (this.byZone[zone] ??= new IntSet(16)).add(host);
  }

  delete(host: number): void {
    if (!this.all.has(host)) return;
    this.all.delete(host);
    const rack = this.rackOf[host]!;
    const zone = this.zoneOf[host]!;
    if (rack >= 0) this.byRack[rack]!.delete(host);
    if (zone >= 0) this.byZone[zone]!.delete(host);
  }

  random(random: Random): number {
    return this.all.random(random);
  }

  /** A random parked host in `rack`, else in `zone`, else anywhere (size must be > 0). */
  randomNear(rack: number, zone: number, random: Random): number {
    const inRack = rack >= 0 ? this.byRack[rack] : undefined;
    if (inRack !== undefined && inRack.size > 0) return inRack.random(random);
    const inZone = zone >= 0 ? this.byZone[zone] : undefined;
    if (inZone !== undefined && inZone.size > 0) return inZone.random(random);
    return this.all.random(random);
  }

  /** A snapshot of the parked hosts. */
  list(): number[] {
    const hosts: number[] = [];
    for (let i = 0; i < this.all.size; i++) hosts.push(this.all.at(i));
    return hosts;
  }
}
