/**
 * Rack crossings: how pieces enter a rack. A host with a rack label sits behind its rack's uplink,
 * which every transfer into the rack from outside crosses, the origin's first copies and the
 * downloads from other racks alike. A link is shared flow by flow, so every download from another
 * rack takes a share of the uplink from the origin's flows into the rack; with many, the origin's
 * flows crawl and the origin, the swarm's bottleneck, idles (simulated, 10 racks of 10 hosts behind
 * 25 Gbit/s uplinks: 0.34 of the bound, each piece entering each rack 6.5 times on average; with
 * the rules below 0.97, each piece entering each rack once).
 *
 * So a host with a rack label fetches a piece from another rack (the origin's transfers are never
 * refused) only when:
 *
 * - fewer than `originReadersMax + 1` pieces are on their way into its rack, the origin's first
 *   copies counted. The origin makes new pieces through `originReadersMax` transfers and each must
 *   enter every rack: a rack taking pieces in through as many transfers keeps pace with the origin
 *   (a peer's transfer runs about as fast as one of the origin's), one more lets it catch up. The
 *   core does not know the uplink's capacity; this needs only one that carries about the origin's
 *   rate. More flows would slow the origin's into the rack, and hold download slots with slow
 *   flows that rack-mates' transfers would use better;
 * - the piece is not already on its way into the rack (from the origin or another rack): the host
 *   waits for the rack-mate being sent it;
 * - while some piece is still held by no host (the origin is still sending), no healthy rack-mate
 *   holds the piece: the host waits for one rather than bring in a second copy. Once the origin is
 *   done, a busy rack-mate's copy no longer keeps a host from a free parent in another rack.
 *
 * A loader's priority pieces and a host with bans of its own (fewer parents left; the copy it would
 * wait for may come from one it refuses) are exempt: with 3 hosts sending corrupt bytes into 10
 * racks, following the rule left such hosts waiting (8.7-9.6 s, one corrupt host not caught in
 * 4 seeds), exempt 8.6 s and all caught.
 *
 * A piece then enters a rack about once and spreads among rack-mates (the ring parents, the scored
 * choice and the offers all prefer them). This module keeps, per rack, the pieces on their way in
 * (one entry per transfer from outside the rack, until it finishes: no more entries than transfers
 * in flight, and a scan of one rack's entries is short, since the bound keeps them few);
 * parent-search.ts applies the rules, reading who holds a piece from the holder rows. Hosts without
 * a rack label follow no rule and count in no rack.
 */

import { assert } from '../../errors.js';
import type { RarityIndex } from './rarity.js';

/** Pieces on their way into one rack at once beyond the origin's readers (see above). */
export const RACK_ENTRIES_BEYOND_READERS = 1;

const LIST_INITIAL = 8;

export class RackCrossings {
  private readonly entriesMax: number;
  private readonly rarity: RarityIndex;
  private coming: Array<Int32Array | undefined> = [];
  private comingLength = new Int32Array(0);

  constructor(originReadersMax: number, rarity: RarityIndex) {
    this.entriesMax = originReadersMax + RACK_ENTRIES_BEYOND_READERS;
    this.rarity = rarity;
  }

  /** True while some piece is held by no host: the origin is still sending first copies. */
  get originSending(): boolean {
    return this.rarity.heldNowhere > 0;
  }

  /** True when `rack` may take in one more piece from another rack (as far as the bound goes). */
  hasRoom(rack: number): boolean {
    return this.entering(rack) < this.entriesMax;
  }

  /** Transfers from outside `rack` in flight into it. */
  entering(rack: number): number {
    return rack < this.comingLength.length ? this.comingLength[rack]! : 0;
  }

  /** Transfers of `piece` from outside `rack` in flight into it. */
  comingCount(rack: number, piece: number): number {
    const list = this.coming[rack];
    let count = 0;
    for (let i = 0; i < this.entering(rack); i++) if (list![i] === piece) count++;
    return count;
  }

  /** True when a transfer from outside `rack` is bringing `piece` into it. */
  isComing(rack: number, piece: number): boolean {
    const list = this.coming[rack];
    const length = this.entering(rack);
    for (let i = 0; i < length; i++) if (list![i] === piece) return true;
    return false;
  }

  /** A transfer of `piece` from outside `rack` (another rack or the origin) to a host in it starts. */
  start(rack: number, piece: number): void {
    this.ensureRacks(rack + 1);
    const length = this.comingLength[rack]!;
    let list = this.coming[rack];
    if (list === undefined || length === list.length) {
      const longer = new Int32Array(Math.max(LIST_INITIAL, length * 2));
      if (list !== undefined) longer.set(list);
      this.coming[rack] = list = longer;
    }
    list[length] = piece;
    this.comingLength[rack] = length + 1;
  }

  /** That transfer finished (verified, failed or cancelled). */
  finish(rack: number, piece: number): void {
    const list = this.coming[rack];
    const last = this.entering(rack) - 1;
    let i = 0;
    while (i <= last && list![i] !== piece) i++;
    assert(i <= last, `piece ${piece} was not on its way into rack ${rack}`);
    list![i] = list![last]!;
    this.comingLength[rack] = last;
  }

  private ensureRacks(rackCount: number): void {
    if (rackCount <= this.comingLength.length) return;
    const size = Math.max(rackCount, this.comingLength.length * 2);
    const lengths = new Int32Array(size);
    lengths.set(this.comingLength);
    this.comingLength = lengths;
  }
}
