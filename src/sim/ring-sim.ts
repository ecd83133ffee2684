/**
 * The simulator's ring mode (swarm/core/ring-plan.ts): the scheduler's ring plan, and each ring
 * parent's pushes to its child as the agents would make them (swarm/core/ring-pusher.ts).
 *
 * - Every host joins a ring at the start (rings of up to RING_MEMBERS_MAX_DEFAULT, or one chain, in id order); a
 *   host that fails leaves its ring (its child is bridged).
 * - A parent pushes one piece at a time to its child, back to back on one stream: the next push
 *   starts as the last one's bytes arrive (no request; the first push after a subscription waits
 *   one request latency, the subscription's).
 * - A host tells its parent at once of pieces it gains some other way (first copies, per-piece
 *   transfers): the HAVE notices on the peer wire. It tells the scheduler of pushed pieces only every
 *   `reportMs` (the batched have-map deltas), so the core plans on a view that old.
 * - Every `check` the ring plan looks for stalled links; a cut host is planned per piece at once.
 * - Cut-through (`cutThrough`, as agents do it: agent/ring-push-session.ts): a host with nothing
 *   to push passes a piece on to its child while it arrives. The passed flow starts `cutThroughLagMs`
 *   after the incoming one (its first read) and cannot end before it: one that would is held until
 *   the incoming flow ends, with its parent's next push behind it. If the incoming flow is lost, so
 *   is the passed one, and the child's link is cut (its feed broke on a truncated push). The agent
 *   passes on a piece whose first bytes land while it sends nothing; here a host that becomes idle
 *   passes on the piece arriving then (the sim starts a push one latency before the last ends).
 *
 * What each host really holds (`truth`) is kept here: a host is complete when it holds every
 * piece, whenever the core hears of it.
 *
 * Once the scheduler is gone (`schedulerGone`) the plan stands still, as it does for agents: pushes
 * go on along the links that are open, nobody is told of them, and no link is checked or bridged. A
 * host that fails closes its feeds in both directions, and a truncated push closes its child's feed;
 * a host whose feed is closed or quiet fetches on its own (fallback-sim.ts, `feedView`).
 */

import { assert } from '../errors.js';
import { hasBit, newBitfield, setBit } from '../swarm/core/bitfield.js';
import { ringFeedDelivers } from '../swarm/core/fallback.js';
import { NO_PARENT, RingPlan, type RingParentChange } from '../swarm/core/ring-plan.js';
import { RingPusher } from '../swarm/core/ring-pusher.js';
import type { SwarmCore } from '../swarm/core/swarm-core.js';
import type { FluidNetwork } from './network.js';

/** A host's ring as it sees it without a scheduler (FallbackView.ring, and whether its feed closed in a chain). */
export interface RingFeedView {
  fed: boolean;
  head: boolean;
  chain: boolean;
  orphan: boolean;
  /** Whose pushes fed it last, once its feed closed. */
  lastParent: number | undefined;
}

export interface RingSimOptions {
  hosts: number;
  pieceCount: number;
  latencyMs: number;
  stallMs: number;
  reportMs: number;
  chain?: boolean;
  /** Members of one ring at most (RingPlanOptions.membersMax). */
  membersMax?: number;
  /** Pass pushed pieces on as they arrive (default false: store and forward). */
  cutThrough?: boolean;
  /** Cut-through: from an incoming push's start to the start of the push passing it on. */
  cutThroughLagMs?: number;
  pieceBytes(piece: number): number;
}

interface PushFlow {
  parent: number;
  child: number;
  piece: number;
  /** When its first bytes leave. */
  startMs: number;
  /** Cut-through: the incoming push this one passes on, while it is under way. */
  upstream?: number;
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
  /** Push flows under way (or held, `held`). */
  private readonly flows = new Map<number, PushFlow>();
  /** Cut-through: an incoming push -> the push passing it on. */
  private readonly passedOn = new Map<number, number>();
  /** Cut-through pushes whose bytes are all sent, held until their incoming push ends. */
  private readonly held = new Set<number>();
  /** Per host: pushes arriving at it, in the order they started. */
  private readonly arriving = new Map<number, number[]>();
  /** Per host: pieces pushed to it that the core has not heard of yet. */
  private readonly unreported = new Map<number, number[]>();
  private nextPushId = PUSH_IDS_FROM;
  private nextReportMs: number;
  /** Feeds broken on a truncated push, to open again (reopenFeeds). */
  private readonly reopen: Array<{ child: number; parent: number }> = [];
  /** Per host: the parent whose pushes feed it now. */
  private readonly feedParent = new Map<number, number>();
  /** Per host whose feed closed: the parent that fed it last. */
  private readonly lastFeedParent = new Map<number, number>();
  /** Per host: when its last push arrived. */
  private readonly lastPushAt = new Map<number, number>();
  /** Set once the scheduler is gone: the plan stands still. */
  private goneSinceMs: number | undefined;
  /** Told of every piece a push brings a host (the fallback's view of holdings, once set). */
  onPushed: ((host: number, piece: number, atMs: number) => void) | undefined;
  pushes = 0;

  constructor(
    options: RingSimOptions,
    private readonly core: SwarmCore,
    private readonly network: FluidNetwork,
  ) {
    this.options = options;
    this.plan = new RingPlan({
      stallMs: options.stallMs,
      chain: options.chain === true,
      ...(options.membersMax === undefined ? {} : { membersMax: options.membersMax }),
    });
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

  holds(host: number, piece: number): boolean {
    return hasBit(this.truth[host]!, piece);
  }

  /**
   * The scheduler is gone: from now on nobody reports, checks, cuts or bridges links; the pushes
   * along the links that are open go on.
   */
  schedulerGone(nowMs: number): void {
    this.goneSinceMs = nowMs;
    this.unreported.clear();
  }

  /**
   * What a host on its own knows of its ring (FallbackView.ring): whether its feed is open and
   * delivers (`ringFeedDelivers`: a push in the last FALLBACK_FEED_QUIET_MS), and whether it heads
   * a chain. Undefined while the scheduler is there.
   */
  feedView(host: number, nowMs: number): RingFeedView | undefined {
    if (this.goneSinceMs === undefined) return undefined;
    const open = this.feedParent.has(host);
    const head = this.plan.isHead(host);
    // As the members are told: a host cut from its chain (no parent, no head) is in no chain.
    const chain = this.plan.chains && (head || this.plan.parentOf(host) !== NO_PARENT);
    return {
      fed: ringFeedDelivers(open, this.lastPushAt.get(host), this.goneSinceMs, nowMs),
      head,
      chain,
      // A member the scheduler named a parent (the plan stands still without it) whose feed ended.
      orphan: chain && !open && !head,
      lastParent: this.lastFeedParent.get(host),
    };
  }

  /** What a host's have-map says of its ring (FallbackPeer.ring), once the scheduler is gone. */
  peerView(
    host: number,
    nowMs: number,
  ): { pushing: boolean; flowing: boolean; held: number; parent?: number; head: boolean } {
    const view = this.feedView(host, nowMs);
    const parent = this.feedParent.get(host);
    return {
      pushing: this.pushing.has(host),
      flowing: view !== undefined && (view.fed || view.head),
      held: this.truthCount[host] ?? 0,
      head: view?.head === true,
      ...(parent === undefined ? {} : { parent }),
    };
  }

  /** A transfer of the core's delivered `piece` to `host`: its parent's pusher skips it. */
  gainedByTransfer(nowMs: number, host: number, piece: number): void {
    this.gain(nowMs, host, piece);
    const parent = this.feedParent.get(host);
    if (parent !== undefined) this.pushing.get(parent)?.pusher.childHas(piece);
  }

  /**
   * A push flow nears its end (one request latency of bytes left): the next push starts now, as
   * the parent writes it behind the last one on the same stream.
   */
  pushEnding(nowMs: number, flowId: number): void {
    const flow = this.flows.get(flowId);
    const pushing = flow === undefined ? undefined : this.pushing.get(flow.parent);
    if (flow === undefined || pushing === undefined || pushing.live !== flowId) return;
    // A piece passed on while it arrives: the next push can go only behind its last bytes.
    if (flow.upstream !== undefined) return;
    pushing.live = undefined;
    this.pump(nowMs, flow.parent);
  }

  /**
   * A push flow finished (its bytes are out of the network). Returns the hosts that gained a piece:
   * its child, and those of cut-through pushes held until it ended.
   */
  finishPush(nowMs: number, flowId: number): number[] {
    const flow = this.flows.get(flowId);
    if (flow === undefined) return [];
    this.unlinkArriving(flow.child, flowId);
    if (flow.upstream !== undefined) {
      // Sent faster than its bytes arrived: it ends when they have all arrived.
      this.held.add(flowId);
      return [];
    }
    return this.deliver(nowMs, flowId, flow);
  }

  private deliver(nowMs: number, flowId: number, flow: PushFlow): number[] {
    assert(flow.upstream === undefined, 'a piece passed on arrived before the push it passes on');
    this.flows.delete(flowId);
    this.held.delete(flowId);
    const gained = [flow.child];
    const pushing = this.pushing.get(flow.parent);
    if (pushing !== undefined && pushing.child === flow.child) {
      if (pushing.live === flowId) pushing.live = undefined;
      this.pushes++;
      this.lastPushAt.set(flow.child, nowMs);
      if (!hasBit(this.truth[flow.child]!, flow.piece)) {
        this.gain(nowMs, flow.child, flow.piece);
        this.onPushed?.(flow.child, flow.piece, nowMs);
        // The batched reports to the scheduler, while there is one.
        if (this.goneSinceMs === undefined) {
          let list = this.unreported.get(flow.child);
          if (list === undefined) this.unreported.set(flow.child, (list = []));
          list.push(flow.piece);
        }
      }
    }
    // The push passing this one on is free to end now.
    const passed = this.passedOn.get(flowId);
    if (passed !== undefined) {
      this.passedOn.delete(flowId);
      const next = this.flows.get(passed);
      if (next !== undefined) {
        delete next.upstream;
        if (this.held.has(passed)) gained.push(...this.deliver(nowMs, passed, next));
      }
    }
    if (pushing !== undefined) this.pump(nowMs, flow.parent);
    return gained;
  }

  /** A host failed: it leaves the ring; its pushes in both directions are gone. */
  leave(nowMs: number, host: number): void {
    if (this.goneSinceMs !== undefined) {
      // Nobody bridges the gap: the feeds to and from the host close.
      this.stopPushing(host);
      const parent = this.feedParent.get(host);
      if (parent !== undefined) this.stopPushing(parent);
      this.reopenFeeds(nowMs);
      return;
    }
    this.plan.leave(nowMs, host);
    this.stopPushing(host);
    for (const [parent, pushing] of this.pushing) if (pushing.child === host) this.stopPushing(parent);
    this.unreported.delete(host);
    this.applyChanges(nowMs);
  }

  /**
   * Feeds that broke on a truncated push open again to the same parent, as a member's does (it
   * subscribes again at once: member.ts RING_RECONNECTS_MAX): its pusher starts over from what the
   * child holds. A parent that no longer pushes to that child (gone, or moved) is left alone.
   */
  private reopenFeeds(nowMs: number): void {
    for (let reopen = this.reopen.shift(); reopen !== undefined; reopen = this.reopen.shift()) {
      const { child, parent } = reopen;
      if (this.pushing.get(parent)?.child === child) this.subscribe(nowMs, child, parent);
    }
  }

  /**
   * Periodic work at `nowMs`: batched reports to the core, then stall checks. Returns true when the
   * core heard something (the caller polls its assignments and cancellations).
   */
  tick(nowMs: number): boolean {
    if (this.goneSinceMs !== undefined) return false;
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
    for (let changes = this.plan.pollChanges(); changes.length > 0; changes = this.plan.pollChanges())
      for (const change of changes) this.applyChange(nowMs, change);
    this.reopenFeeds(nowMs);
  }

  private applyChange(nowMs: number, { host, parent, ring }: RingParentChange): void {
    this.core.setRing(nowMs, host, ring, parent !== NO_PARENT);
    this.subscribe(nowMs, host, parent);
  }

  /** `child`'s feed comes from `parent` from now on (NO_PARENT: from nobody). */
  private subscribe(nowMs: number, child: number, parent: number): void {
    const from = this.feedParent.get(child);
    if (from !== undefined) this.stopPushing(from);
    if (parent === NO_PARENT) return;
    this.stopPushing(parent);
    const pusher = new RingPusher(this.options.pieceCount);
    pusher.subscribe(this.truth[child]!, this.truth[parent]!);
    this.pushing.set(parent, { pusher, child, live: undefined, fresh: true });
    this.feedParent.set(child, parent);
    this.pump(nowMs, parent);
  }

  /**
   * Without a scheduler, a host whose feed closed subscribes to `parent` itself (fallback.ts
   * `orphanMove`). A parent here pushes to one child: one that pushes already refuses (false).
   */
  subscribeOnOwn(nowMs: number, child: number, parent: number): boolean {
    assert(this.goneSinceMs !== undefined, 'a subscription of its own, with a scheduler');
    if (this.pushing.has(parent)) return false;
    this.subscribe(nowMs, child, parent);
    this.reopenFeeds(nowMs);
    // Its feed counts as delivering for a while, as the member's does once it subscribes.
    this.lastPushAt.set(child, nowMs);
    return true;
  }

  private pump(nowMs: number, parent: number): void {
    const pushing = this.pushing.get(parent);
    if (pushing === undefined || pushing.live !== undefined) return;
    const piece = pushing.pusher.next();
    if (piece >= 0) {
      this.startPush(nowMs + (pushing.fresh ? this.options.latencyMs : 0), parent, pushing, piece);
      return;
    }
    // Nothing held to push: pass on a piece arriving now.
    if (this.options.cutThrough !== true) return;
    for (const incoming of this.arriving.get(parent) ?? []) {
      const flow = this.flows.get(incoming);
      if (flow === undefined || this.passedOn.has(incoming) || !pushing.pusher.take(flow.piece)) continue;
      this.startPush(
        nowMs + (pushing.fresh ? this.options.latencyMs : 0),
        parent,
        pushing,
        flow.piece,
        incoming,
      );
      return;
    }
  }

  /** Starts `parent`'s push of `piece` to its child; with `upstream`, passing that push on. */
  private startPush(
    startMs: number,
    parent: number,
    pushing: Pushing,
    piece: number,
    upstream?: number,
  ): void {
    const flowId = this.nextPushId--;
    pushing.live = flowId;
    pushing.fresh = false;
    // Passed on: no sooner than one first read after the incoming push's first bytes left.
    const incoming = upstream === undefined ? undefined : this.flows.get(upstream);
    const at =
      incoming === undefined
        ? startMs
        : Math.max(startMs, incoming.startMs + (this.options.cutThroughLagMs ?? 0));
    const flow: PushFlow = { parent, child: pushing.child, piece, startMs: at };
    if (upstream !== undefined) {
      flow.upstream = upstream;
      this.passedOn.set(upstream, flowId);
    }
    this.flows.set(flowId, flow);
    let list = this.arriving.get(pushing.child);
    if (list === undefined) this.arriving.set(pushing.child, (list = []));
    list.push(flowId);
    this.network.add(flowId, parent, pushing.child, this.options.pieceBytes(piece), at);
    // The child, if idle, passes it on in turn.
    const next = this.pushing.get(pushing.child);
    if (this.options.cutThrough === true && next !== undefined && next.live === undefined)
      this.pump(at, pushing.child);
  }

  private unlinkArriving(host: number, flowId: number): void {
    const list = this.arriving.get(host);
    if (list === undefined) return;
    const index = list.indexOf(flowId);
    if (index >= 0) list.splice(index, 1);
    if (list.length === 0) this.arriving.delete(host);
  }

  private stopPushing(parent: number): void {
    const pushing = this.pushing.get(parent);
    if (pushing === undefined) return;
    this.pushing.delete(parent);
    if (this.feedParent.get(pushing.child) === parent) {
      this.feedParent.delete(pushing.child);
      this.lastFeedParent.set(pushing.child, parent);
    }
    for (const [flowId, flow] of this.flows) if (flow.parent === parent) this.dropFlow(flowId, flow);
  }

  /**
   * A push is gone before it ended: so is the push passing it on (its child got a truncated push,
   * and its feed breaks: the link is cut, as the scheduler does on the member's report).
   */
  private dropFlow(flowId: number, flow: PushFlow): void {
    this.network.remove(flowId);
    this.flows.delete(flowId);
    this.held.delete(flowId);
    this.unlinkArriving(flow.child, flowId);
    if (flow.upstream !== undefined) this.passedOn.delete(flow.upstream);
    const passed = this.passedOn.get(flowId);
    if (passed === undefined) return;
    this.passedOn.delete(flowId);
    const next = this.flows.get(passed);
    if (next === undefined) return;
    const pushing = this.pushing.get(next.parent);
    if (pushing?.live === passed) pushing.live = undefined;
    this.dropFlow(passed, next);
    // The child's feed broke on a truncated push: it opens again (reopenFeeds, once the change
    // that dropped this push is applied). Without a scheduler the member leaves that to its move
    // (orphanMove, which subscribes again to a parent that answers).
    if (this.goneSinceMs === undefined) this.reopen.push({ child: next.child, parent: next.parent });
    else this.stopPushing(next.parent);
  }
}
