/**
 * The ring plan: which host feeds which by pushes, and when a ring link has stalled.
 *
 * In ring mode the hosts of a swarm (those the shell makes members) form one ring in host-id order:
 * each member's ring parent is the member before it, the first member's the last. A parent pushes
 * its child every piece it holds that the child lacks, as it verifies them (ring-pusher.ts), with
 * no assignment, request, ending notice or report per piece; the child tells the scheduler what it
 * gained in batches. A piece that enters the ring at one host (its first copy, from the origin)
 * goes round it once. Each host then takes about 1/N of the model from the origin and the rest from
 * one parent at its link's full rate: a ring all-gather.
 *
 * The core (swarm-core.ts) plans per piece only what the ring does not bring: a fed host gets first
 * copies and the pieces a loader waits for (SwarmCore.setRingFed). The plan keeps the links:
 *
 * - A member that joins is put in its place by id: its parent is the member before it, and it
 *   becomes the parent of the member after it (whose old parent no longer feeds it). In a chain it
 *   joins at the tail: a member coming back (an agent restarted on its cache) is behind the others,
 *   and as a parent ahead of them it would hold the whole chain back.
 * - A member that leaves is bridged: its child's parent becomes its own parent.
 * - A link stalls when its parent holds a piece its child lacks (in the scheduler's view) and the
 *   child has gained nothing through the ring for `stallMs`. The plan then cuts the link: the child
 *   has no ring parent from then on and the core plans it per piece, as without a ring. It still
 *   feeds its own child. A cut host stays cut (no flapping between modes); the shell may make it a
 *   member again by leave and join.
 *
 * Pure: time comes in as `nowMs`; "does the parent hold a piece the child lacks" is asked of the
 * caller (the core's `holdsMissing`), and only of links that have been quiet for half the stall
 * time, so a healthy ring costs no bitfield scans.
 */

import { assert } from '../../errors.js';
import { CHAIN_MEMBERS_MAX_DEFAULT, RING_MEMBERS_MAX_DEFAULT, type HostId } from './types.js';

export const NO_PARENT = -1;
export const NO_RING = -1;
/**
 * A ring link quiet this long while its parent has more is cut. A piece crosses a 100 Mbit/s link
 * in 42 ms (512 KiB), so a healthy link is never quiet for seconds; a parent stuck that long is
 * worth routing around.
 */
export const RING_STALL_MS_DEFAULT = 2000;
/**
 * Origin readers in ring mode: one per member of a full ring at least, one at a time per host. Each
 * host then reads its share of first copies as a slow, steady stream beside its parent's pushes,
 * as a ring all-gather wants; four readers for eight hosts gave half the hosts an origin flow on
 * top of a push stream that needs 7/8 of the link, and queued pushes behind it (fan-out, 8 x 200
 * Mbit/s: the last pieces 0.98-1.39 s after the origin's last byte, against 0.66-0.78 s with eight).
 */
export function ringOriginReaders(
  originReaders: number,
  chain = false,
): { originReadersMax: number; originReadersPerHostMax: number } {
  // A chain's head takes every first copy: all the readers.
  if (chain) return { originReadersMax: originReaders, originReadersPerHostMax: originReaders };
  return { originReadersMax: Math.max(originReaders, RING_MEMBERS_MAX_DEFAULT), originReadersPerHostMax: 1 };
}

/**
 * The scheduler's default (`auto`): one chain while it is short enough to beat per-piece planning.
 * A chain's tail trails its head by a lag per hop: half a round trip and the first read passed on
 * as it arrives (256 KiB). Over n hops that is n lags against the S/B the model takes: simulated,
 * 8 hosts x 200 Mbit/s on 256 MiB 0.986 (per piece 0.959), 100 hosts 0.904 (0.948), 300 hosts
 * 0.766 (0.941). Taking the lag as CHAIN_HOP_LAG_BYTES at the link's rate (the first read, and
 * what the link carries in half a round trip, up to 256 KiB), a chain of n loses
 * n x CHAIN_HOP_LAG_BYTES / S of the time; chains are used while that stays under
 * CHAIN_AUTO_LAG_SHARE, about what per-piece planning loses to its exchanges. A network that carries
 * more than 256 KiB in half a round trip (100 Gbit/s with a 0.5 ms round trip) makes chains lose
 * sooner: there, `--per-piece`.
 */
export const CHAIN_HOP_LAG_BYTES = 512 * 1024;
export const CHAIN_AUTO_LAG_SHARE = 0.03;

/** Auto mode: hosts one chain may hold for a model of `modelBytes` (under 2: no chain at all). */
export function autoChainMembersMax(modelBytes: number): number {
  return Math.floor((CHAIN_AUTO_LAG_SHARE * modelBytes) / CHAIN_HOP_LAG_BYTES);
}

/** How often a fed host tells the scheduler of the pieces pushed to it (one batched delta). */
export const RING_REPORT_MS_DEFAULT = 250;

/** A member's ring and ring parent, changed, for the shell to pass on (NO_PARENT: none now). */
export interface RingParentChange {
  host: HostId;
  parent: HostId;
  ring: number;
}

export { CHAIN_MEMBERS_MAX_DEFAULT, RING_MEMBERS_MAX_DEFAULT } from './types.js';

export interface RingPlanOptions {
  /** A link whose child gains nothing through it this long while its parent has more is cut. */
  stallMs: number;
  /**
   * Members of one ring at most (default RING_MEMBERS_MAX_DEFAULT, for chains
   * CHAIN_MEMBERS_MAX_DEFAULT: one chain); more make another ring.
   */
  membersMax?: number;
  /**
   * Chains instead of rings: members in the order they joined; the first (the head) has no parent
   * and takes the model per piece (the origin's first copies); the others are fed by the member
   * before them.
   */
  chain?: boolean;
}

export class RingPlan {
  private readonly stallMs: number;
  private readonly membersMax: number;
  private readonly chain: boolean;
  /** Each ring's members: a ring's by id, ascending; a chain's in the order they joined, head first. */
  private readonly rings = new Map<number, HostId[]>();
  private nextRingId = 0;
  private readonly ringOfHost = new Map<HostId, number>();
  /** Per member: its ring parent (NO_PARENT when it has none or was cut). */
  private readonly parent = new Map<HostId, HostId>();
  private readonly cutHosts = new Set<HostId>();
  /** Per fed member: when it last gained a piece through the ring, or its link was made. */
  private readonly progressMs = new Map<HostId, number>();
  /** Per fed member: since when its parent was last seen holding a piece it lacks, while quiet. */
  private readonly waitingSinceMs = new Map<HostId, number>();
  /** Per fed member whose parent had nothing for it at the last look: when to look again. */
  private readonly lookAfterMs = new Map<HostId, number>();
  private changes: HostId[] = [];
  private readonly announced = new Map<HostId, HostId>();

  constructor(options: RingPlanOptions) {
    assert(Number.isFinite(options.stallMs) && options.stallMs > 0, 'ring stallMs must be > 0');
    this.stallMs = options.stallMs;
    this.chain = options.chain === true;
    this.membersMax =
      options.membersMax ?? (this.chain ? CHAIN_MEMBERS_MAX_DEFAULT : RING_MEMBERS_MAX_DEFAULT);
    assert(Number.isInteger(this.membersMax) && this.membersMax >= 2, 'ring membersMax must be >= 2');
  }

  get size(): number {
    return this.parent.size;
  }

  /** Every member, of every ring. */
  members(): HostId[] {
    return [...this.parent.keys()];
  }

  has(host: HostId): boolean {
    return this.parent.has(host);
  }

  /** Members, those fed by a ring parent now, and those cut. */
  summary(): { members: number; fed: number; cut: number } {
    let fed = 0;
    for (const parent of this.parent.values()) if (parent !== NO_PARENT) fed++;
    return { members: this.parent.size, fed, cut: this.cutHosts.size };
  }

  /** The member's ring, or NO_RING. */
  ringOf(host: HostId): number {
    return this.ringOfHost.get(host) ?? NO_RING;
  }

  /** The member's ring parent, or NO_PARENT (not a member, alone in its ring, or cut). */
  parentOf(host: HostId): HostId {
    return this.parent.get(host) ?? NO_PARENT;
  }

  isCut(host: HostId): boolean {
    return this.cutHosts.has(host);
  }

  /** Whether the plan makes chains (rings otherwise). */
  get chains(): boolean {
    return this.chain;
  }

  /** In a chain: whether `host` is its chain's first member (the one that reads the origin). */
  isHead(host: HostId): boolean {
    const ring = this.ringOfHost.get(host);
    return this.chain && ring !== undefined && this.rings.get(ring)?.[0] === host;
  }

  /**
   * Makes `host` a member of the first ring with room, or of a new ring; returns the ring. Each
   * ring is its own cycle; a piece enters each ring once (from the origin, or from a host outside
   * the ring: the core's ring entries).
   */
  join(nowMs: number, host: HostId): number {
    assert(Number.isInteger(host) && host >= 0, `ring member ${host} must be a host id`);
    const known = this.ringOfHost.get(host);
    if (known !== undefined) return known;
    let ring = NO_RING;
    for (const [id, members] of this.rings) {
      if (members.length < this.membersMax && (ring === NO_RING || id < ring)) ring = id;
    }
    if (ring === NO_RING) {
      ring = this.nextRingId++;
      this.rings.set(ring, []);
    }
    const members = this.rings.get(ring)!;
    // A ring keeps its members by id. A chain takes a member at its tail: one that comes back
    // (an agent restarted with its pieces) must not become the parent of members ahead of it.
    let index = 0;
    if (this.chain) index = members.length;
    else while (index < members.length && (members[index] as number) < host) index++;
    members.splice(index, 0, host);
    this.ringOfHost.set(host, ring);
    this.parent.set(host, NO_PARENT);
    this.changes.push(host);
    this.relink(nowMs, members, host);
    this.relink(nowMs, members, members[(index + 1) % members.length] as number);
    return ring;
  }

  leave(nowMs: number, host: HostId): void {
    const ring = this.ringOfHost.get(host);
    if (ring === undefined) return;
    const members = this.rings.get(ring)!;
    const index = members.indexOf(host);
    members.splice(index, 1);
    this.ringOfHost.delete(host);
    this.parent.delete(host);
    this.cutHosts.delete(host);
    this.restartLink(host, undefined);
    // A member that left has nothing to announce; one that comes back is announced afresh.
    this.announced.delete(host);
    // The member after it is bridged to the one before (in a chain, the head's child heads it).
    if (members.length === 0) this.rings.delete(ring);
    else this.relink(nowMs, members, members[index % members.length] as number);
  }

  /** Cuts `host`'s link now (its feed failed: a corrupt push, a refusal, a dropped connection). */
  cut(host: HostId): void {
    if (this.parentOf(host) === NO_PARENT) return;
    this.cutHosts.add(host);
    this.setParent(host, NO_PARENT, undefined);
  }

  /** `host` gained a piece pushed by its ring parent: the link is alive. */
  delivered(nowMs: number, host: HostId): void {
    if (this.parentOf(host) === NO_PARENT) return;
    this.restartLink(host, nowMs);
  }

  /**
   * Cuts the links that stalled by `nowMs`. `holdsMissing(parent, child)`: whether the parent holds a
   * piece the child lacks. Returns the members cut now.
   */
  check(nowMs: number, holdsMissing: (parent: HostId, child: HostId) => boolean): HostId[] {
    const cutNow: HostId[] = [];
    for (const [host, parent] of this.parent) {
      if (parent === NO_PARENT) continue;
      const quietSince = this.progressMs.get(host) ?? nowMs;
      if (nowMs - quietSince < this.stallMs / 2 || nowMs < (this.lookAfterMs.get(host) ?? 0)) continue;
      if (!holdsMissing(parent, host)) {
        this.waitingSinceMs.delete(host);
        this.lookAfterMs.set(host, nowMs + this.stallMs / 4);
        continue;
      }
      const waitingSince = this.waitingSinceMs.get(host) ?? nowMs;
      this.waitingSinceMs.set(host, waitingSince);
      if (nowMs - Math.max(waitingSince, quietSince) < this.stallMs) continue;
      this.cutHosts.add(host);
      this.setParent(host, NO_PARENT, undefined);
      cutNow.push(host);
    }
    return cutNow;
  }

  /** When `check` next has something to look at (undefined: no fed member). */
  nextCheckMs(): number | undefined {
    let next: number | undefined;
    for (const [host, parent] of this.parent) {
      if (parent === NO_PARENT) continue;
      const progress = this.progressMs.get(host) ?? 0;
      const waiting = this.waitingSinceMs.get(host);
      const due =
        waiting === undefined
          ? Math.max(progress + this.stallMs / 2, this.lookAfterMs.get(host) ?? 0)
          : Math.max(waiting, progress) + this.stallMs;
      if (next === undefined || due < next) next = due;
    }
    return next;
  }

  /**
   * Members whose ring or parent changed since the last poll, each once with its latest state (a
   * new member is announced even without a parent: it has a ring).
   */
  pollChanges(): RingParentChange[] {
    const out: RingParentChange[] = [];
    for (const host of this.changes) {
      if (!this.parent.has(host)) continue;
      const parent = this.parentOf(host);
      if (this.announced.get(host) === parent) continue;
      this.announced.set(host, parent);
      out.push({ host, parent, ring: this.ringOf(host) });
    }
    this.changes = [];
    return out;
  }

  /** Gives `host` the parent its place in its ring says (none when alone or cut). */
  private relink(nowMs: number, members: HostId[], host: HostId): void {
    const index = members.indexOf(host);
    const before = members[(index - 1 + members.length) % members.length] as number;
    const head = this.chain && index === 0;
    const parent = this.cutHosts.has(host) || before === host || head ? NO_PARENT : before;
    if (parent === this.parentOf(host)) return;
    this.setParent(host, parent, nowMs);
  }

  /** `sinceMs`: when the new link was made (unused for NO_PARENT). */
  private setParent(host: HostId, parent: HostId, sinceMs: number | undefined): void {
    this.parent.set(host, parent);
    this.restartLink(host, parent === NO_PARENT ? undefined : sinceMs);
    this.changes.push(host);
  }

  /** The link into `host` starts afresh: quiet since `sinceMs`, or gone (undefined). */
  private restartLink(host: HostId, sinceMs: number | undefined): void {
    if (sinceMs === undefined) this.progressMs.delete(host);
    else this.progressMs.set(host, sinceMs);
    this.waitingSinceMs.delete(host);
    this.lookAfterMs.delete(host);
  }
}
