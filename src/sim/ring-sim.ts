/**
 * The simulator's ring mode (swarm/core/ring-plan.ts): the scheduler's ring plan, and each ring
 * parent's pushes to its child as the agents would make them (swarm/core/ring-pusher.ts).
 *
 * - Every host joins a ring at the start (rings of up to RING_MEMBERS_MAX_DEFAULT, in id order); a
 *   host that fails leaves its ring (its child is bridged).
 * - A parent pushes one piece at a time to its child, back to back on one stream: the next push
 *   starts as the last one's bytes arrive (no request; the first push after a subscription waits
 *   one request latency, the subscription's).
 * - A host tells its parent at once of pieces it gains some other way (first copies, per-piece
 *   transfers): the HAVE notices on the peer wire. It tells the scheduler of pushed pieces only every
 *   `reportMs` (the batched have-map deltas), so the core plans on a view that old.
 * - Every `check` the ring plan looks for stalled links; a cut host is planned per piece at once.
 *
 * What each host really holds (`truth`) is kept here: a host is complete when it holds every
 * piece, whenever the core hears of it.
 */

import { hasBit, newBitfield, setBit } from '../swarm/core/bitfield.js';
import { NO_PARENT, RingPlan } from '../swarm/core/ring-plan.js';
import { RingPusher } from '../swarm/core/ring-pusher.js';
import type { SwarmCore } from '../swarm/core/swarm-core.js';
import type { FluidNetwork } from './network.js';

export interface RingSimOptions {
  hosts: number;
  pieceCount: number;
  latencyMs: number;
  stallMs: number;
  reportMs: number;
  chain?: boolean;
  pieceBytes(piece: number): number;
}

interface Pushing {
  pusher: RingPusher;
  child: number;
  /** The push under way whose end is not yet near, if any (the next starts when it nears its end). */
  live: number | undefined;
  /** The first push after a subscription waits for the subscription to arrive. */
  fresh: boolean;
}

/** Push flow ids count down from here: far above any id the core gives in a simulated run. */
const PUSH_IDS_FROM = Number.MAX_SAFE_INTEGER;

export class RingSim {
  readonly plan: RingPlan;
  private readonly options: RingSimOptions;
  private readonly truth: Uint32Array[];
  private readonly truthCount: Int32Array;
  /** Per parent: its pusher and child. */
  private readonly pushing = new Map<number, Pushing>();
  /** Push flows under way: flow id -> parent and piece. */
  private readonly flows = new Map<number, { parent: number; piece: number }>();
  /** Per host: pieces pushed to it that the core has not heard of yet. */
  private readonly unreported = new Map<number, number[]>();
  private nextPushId = PUSH_IDS_FROM;
  private nextReportMs: number;
  pushes = 0;

  constructor(
    options: RingSimOptions,
    private readonly core: SwarmCore,
    private readonly network: FluidNetwork,
  ) {
    this.options = options;
    this.plan = new RingPlan({ stallMs: options.stallMs, chain: options.chain === true });
    this.truth = Array.from({ length: options.hosts }, () => newBitfield(options.pieceCount));
    this.truthCount = new Int32Array(options.hosts);
    this.nextReportMs = options.reportMs;
    for (let host = 0; host < options.hosts; host++) this.plan.join(0, host);
    this.applyChanges(0);
  }

  isPush(flowId: number): boolean {
    return this.flows.has(flowId);
  }

  /** The lowest push id handed out: the core's ids must stay below it. */
  get lowestPushId(): number {
    return this.nextPushId + 1;
  }

  /** Hosts whose ring link was cut. */
  get cuts(): number {
    let cut = 0;
    for (let host = 0; host < this.options.hosts; host++) if (this.plan.isCut(host)) cut++;
    return cut;
  }

  isComplete(host: number): boolean {
    return this.truthCount[host] === this.options.pieceCount;
  }

  /** A transfer of the core's delivered `piece` to `host`: its parent's pusher skips it. */
  gainedByTransfer(nowMs: number, host: number, piece: number): void {
    this.gain(nowMs, host, piece);
    const parent = this.plan.parentOf(host);
    if (parent !== NO_PARENT) this.pushing.get(parent)?.pusher.childHas(piece);
  }

  /**
   * A push flow nears its end (one request latency of bytes left): the next push starts now, as
   * the parent writes it behind the last one on the same stream.
   */
  pushEnding(nowMs: number, flowId: number): void {
    const flow = this.flows.get(flowId);
    const pushing = flow === undefined ? undefined : this.pushing.get(flow.parent);
    if (flow === undefined || pushing === undefined || pushing.live !== flowId) return;
    pushing.live = undefined;
    this.pump(nowMs, flow.parent);
  }

  /** A push flow finished. */
  finishPush(nowMs: number, flowId: number): void {
    const flow = this.flows.get(flowId);
    if (flow === undefined) return;
    this.flows.delete(flowId);
    const pushing = this.pushing.get(flow.parent);
    if (pushing === undefined) return;
    if (pushing.live === flowId) pushing.live = undefined;
    this.pushes++;
    const child = pushing.child;
    if (!hasBit(this.truth[child]!, flow.piece)) {
      this.gain(nowMs, child, flow.piece);
      let list = this.unreported.get(child);
      if (list === undefined) this.unreported.set(child, (list = []));
      list.push(flow.piece);
    }
    this.pump(nowMs, flow.parent);
  }

  /** A host failed: it leaves the ring; its pushes in both directions are gone. */
  leave(nowMs: number, host: number): void {
    this.plan.leave(nowMs, host);
    this.stopPushing(host);
    for (const [parent, pushing] of this.pushing) if (pushing.child === host) this.stopPushing(parent);
    this.unreported.delete(host);
    this.applyChanges(nowMs);
  }

  /**
   * Periodic work at `nowMs`: batched reports to the core, then stall checks. Returns true when the
   * core heard something (the caller polls its assignments and cancellations).
   */
  tick(nowMs: number): boolean {
    let told = false;
    if (nowMs >= this.nextReportMs) {
      this.nextReportMs = nowMs + this.options.reportMs;
      for (const [host, pieces] of this.unreported) {
        this.core.handleHeld(nowMs, host, pieces);
        this.plan.delivered(nowMs, host);
        told = true;
      }
      this.unreported.clear();
    }
    const due = this.plan.nextCheckMs();
    if (due !== undefined && due <= nowMs) {
      const cut = this.plan.check(nowMs, (parent, child) => this.core.holdsMissing(parent, child));
      if (cut.length > 0) told = true;
      this.applyChanges(nowMs);
    }
    return told;
  }

  /** True while reports wait to be told: the run is not over while they do. */
  get busy(): boolean {
    return this.unreported.size > 0;
  }

  private gain(nowMs: number, host: number, piece: number): void {
    const truth = this.truth[host]!;
    if (hasBit(truth, piece)) return;
    setBit(truth, piece);
    this.truthCount[host]!++;
    const pushing = this.pushing.get(host);
    if (pushing !== undefined) {
      pushing.pusher.verified(piece);
      this.pump(nowMs, host);
    }
  }

  /** Passes ring parent changes on: the core's fed flags, and the pushers' subscriptions. */
  private applyChanges(nowMs: number): void {
    for (const { host, parent, ring } of this.plan.pollChanges()) {
      this.core.setRing(nowMs, host, ring, parent !== NO_PARENT);
      for (const [from, pushing] of this.pushing) if (pushing.child === host) this.stopPushing(from);
      if (parent === NO_PARENT) continue;
      this.stopPushing(parent);
      const pusher = new RingPusher(this.options.pieceCount);
      pusher.subscribe(this.truth[host]!, this.truth[parent]!);
      this.pushing.set(parent, { pusher, child: host, live: undefined, fresh: true });
      this.pump(nowMs, parent);
    }
  }

  private pump(nowMs: number, parent: number): void {
    const pushing = this.pushing.get(parent);
    if (pushing === undefined || pushing.live !== undefined) return;
    const piece = pushing.pusher.next();
    if (piece < 0) return;
    const flow = this.nextPushId--;
    pushing.live = flow;
    this.flows.set(flow, { parent, piece });
    const startMs = nowMs + (pushing.fresh ? this.options.latencyMs : 0);
    pushing.fresh = false;
    this.network.add(flow, parent, pushing.child, this.options.pieceBytes(piece), startMs);
  }

  private stopPushing(parent: number): void {
    if (!this.pushing.delete(parent)) return;
    for (const [flowId, flow] of this.flows) {
      if (flow.parent !== parent) continue;
      this.network.remove(flowId);
      this.flows.delete(flowId);
    }
  }
}
