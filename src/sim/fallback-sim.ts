/**
 * The simulator's hosts after the scheduler is gone: each runs the agents' fallback policy
 * (swarm/core/fallback.ts) on what it alone knows, as a SwarmMember without a scheduler does:
 *
 * - the transfers under way when the scheduler went finish and count (the member keeps them);
 * - every known peer's have-map is as old as the host's last refresh, at most `haveRefreshMs` (the
 *   member asks its peers again when its copy is older than that); here every live host is a known
 *   peer (the scheduler's replies name them to the member);
 * - a host looks for work when one of its own fetches ends and every `pumpEveryMs` (the member's
 *   loop); at most `downloadsMax` own fetches and `originReadsMax` origin reads at once;
 * - a peer whose upload slots are full refuses: the host forgets that peer's map until its next
 *   refresh and picks again (the member's fetch fails with SWARM_BUSY; here the refusal costs no
 *   time, which flatters the fallback a little).
 *
 * - in ring mode (`ring`) the pushes go on without the scheduler (ring-sim.ts): a host whose feed
 *   delivers fetches only blocked pieces (none here: nothing reads), a chain's head reads every
 *   piece nobody holds with all its download slots, and pieces pushed to a host are its as they
 *   arrive (`gained`); what a host fetches is passed on to its ring child (`onGained`).
 *
 * A have-map costs no memory per host: each piece's arrival time is kept per holder, and a host
 * that refreshed at time t sees exactly the pieces that arrived by t.
 */

import {
  FALLBACK_HAVE_REFRESH_MS,
  FALLBACK_PUMP_EVERY_MS,
  afterPeerFetch,
  orphanMove,
  pickFallbackFetches,
  type FallbackPeer,
  type FallbackView,
} from '../swarm/core/fallback.js';
import { Random } from '../swarm/core/random.js';
import type { FluidNetwork } from './network.js';
import type { RingFeedView } from './ring-sim.js';

export interface FallbackSimOptions {
  hosts: number;
  pieceCount: number;
  downloadsMax: number;
  originReadsMax: number;
  uploadsMax: number;
  latencyMs: number;
  seed: number;
  /** The network endpoint of the origin. */
  originEndpoint: number;
  pieceBytes(piece: number): number;
  /** Whether the scheduler's core had `host` hold `piece` when it went. */
  heldAtLoss(host: number, piece: number): boolean;
  haveRefreshMs?: number;
  pumpEveryMs?: number;
  /** Transfer ids for the hosts' own fetches start here (above the core's). */
  firstTransferId: number;
  /** Each host's rack (hosts in racks: the members learn their rack-mates from the scheduler). */
  rackOf?: (host: number) => number;
  /** Ring mode: what a peer's have-map says of its ring (FallbackPeer.ring). */
  ringPeer?: (host: number, nowMs: number) => NonNullable<FallbackPeer<number>['ring']>;
  /** Ring mode: what a host knows of its ring feed (FallbackView.ring), and whether it closed in a chain. */
  ringView?: (host: number, nowMs: number) => RingFeedView | undefined;
  /** Ring mode: a host whose feed closed in a chain subscribes to a peer itself; false if refused. */
  subscribe?: (child: number, parent: number, nowMs: number) => boolean;
  /** Told of every piece a host comes to hold by a fetch (ring mode: its ring child gets it next). */
  onGained?: (host: number, piece: number, atMs: number) => void;
}

interface OwnFetch {
  dst: number;
  piece: number;
  src: number;
}

export class FallbackSim {
  /** arrivedAt[host][piece]: when the host came to hold the piece (Infinity: not yet). */
  private readonly arrivedAt: Float64Array[];
  private readonly heldCount: Int32Array;
  private readonly refreshedAt: Float64Array;
  /** Peers each host has forgotten until its next refresh (they refused). */
  private readonly forgotten: Array<Set<number>>;
  /** Busy refusals in a row, per host and peer (0 once the peer takes a fetch). */
  private readonly busyStreaks: Array<Map<number, number>>;
  /** Peers refused busy too often in a row: their maps do not count until the next refresh. */
  private readonly dropped: Array<Set<number>>;
  private readonly fetchingPieces: Array<Set<number>>;
  private readonly running: Int32Array;
  private readonly originReads: Int32Array;
  private readonly uploads: Int32Array;
  private readonly own = new Map<number, OwnFetch>();
  /** Each host's view of its peers, rebuilt when it refreshes, forgets a peer or a host dies. */
  private readonly peerViews: Array<FallbackPeer<number>[] | undefined>;
  private readonly leftover = new Map<number, { dst: number; piece: number; src: number }>();
  private readonly dead = new Set<number>();
  /** Ring mode: chain members whose feed ended, as of their last pump. */
  private readonly orphans = new Set<number>();
  /** Ring mode: hosts leading what is left of their chain (`orphanMove`), as of their last pump. */
  private readonly actingHead = new Set<number>();
  private readonly random: Random;
  private nextTransferId: number;
  private nextPumpMs: number;
  transfers = 0;
  busy = 0;

  constructor(
    private readonly options: FallbackSimOptions,
    private readonly network: FluidNetwork,
    atMs: number,
  ) {
    const { hosts, pieceCount } = options;
    this.arrivedAt = Array.from({ length: hosts }, (_, host) => {
      const arrived = new Float64Array(pieceCount).fill(Number.POSITIVE_INFINITY);
      for (let piece = 0; piece < pieceCount; piece++)
        if (options.heldAtLoss(host, piece)) arrived[piece] = atMs;
      return arrived;
    });
    this.heldCount = Int32Array.from(this.arrivedAt, (arrived) => arrived.filter((t) => t <= atMs).length);
    this.refreshedAt = new Float64Array(hosts).fill(atMs);
    this.forgotten = Array.from({ length: hosts }, () => new Set<number>());
    this.busyStreaks = Array.from({ length: hosts }, () => new Map<number, number>());
    this.dropped = Array.from({ length: hosts }, () => new Set<number>());
    this.fetchingPieces = Array.from({ length: hosts }, () => new Set<number>());
    this.running = new Int32Array(hosts);
    this.originReads = new Int32Array(hosts);
    this.uploads = new Int32Array(hosts + 1);
    this.random = new Random(options.seed ^ 0xfa11bac);
    this.nextTransferId = options.firstTransferId;
    this.nextPumpMs = atMs;
    this.peerViews = new Array<FallbackPeer<number>[] | undefined>(hosts).fill(undefined);
  }

  /** A transfer the scheduler assigned before it went, still under way. */
  adoptLeftover(transferId: number, src: number, dst: number, piece: number): void {
    this.leftover.set(transferId, { dst, piece, src });
    this.fetchingPieces[dst]?.add(piece);
    this.uploads[src] = (this.uploads[src] ?? 0) + 1;
  }

  isComplete(host: number): boolean {
    return this.heldCount[host] === this.options.pieceCount;
  }

  /** A transfer finished (`delivered`) or vanished; returns whether it was one this class knows. */
  settle(transferId: number, delivered: boolean, atMs: number): boolean {
    const leftover = this.leftover.get(transferId);
    const own = this.own.get(transferId);
    if (leftover === undefined && own === undefined) return false;
    const dst = (leftover ?? own)!.dst;
    const piece = (leftover ?? own)!.piece;
    this.leftover.delete(transferId);
    this.own.delete(transferId);
    this.fetchingPieces[dst]?.delete(piece);
    const src = (leftover ?? own)!.src;
    this.uploads[src] = (this.uploads[src] ?? 0) - 1;
    if (own !== undefined) {
      this.running[dst] = (this.running[dst] ?? 0) - 1;
      if (src === this.options.originEndpoint) this.originReads[dst] = (this.originReads[dst] ?? 0) - 1;
    }
    if (delivered && this.gained(dst, piece, atMs)) this.options.onGained?.(dst, piece, atMs);
    if (own !== undefined && !this.dead.has(dst)) this.pump(dst, atMs);
    return true;
  }

  /** `host` holds `piece` from `atMs` (a fetch, or in ring mode a push); false if it held it or is dead. */
  gained(host: number, piece: number, atMs: number): boolean {
    const arrived = this.arrivedAt[host];
    if (arrived === undefined || this.dead.has(host) || arrived[piece] !== Number.POSITIVE_INFINITY)
      return false;
    arrived[piece] = atMs;
    this.heldCount[host] = (this.heldCount[host] ?? 0) + 1;
    return true;
  }

  /** A host died: it fetches and serves nothing more. Its transfers are settled by the caller. */
  removeHost(host: number): void {
    this.dead.add(host);
    this.peerViews.fill(undefined);
  }

  /** The host reads its peers' have-maps again. */
  private refresh(host: number, atMs: number): void {
    this.refreshedAt[host] = atMs;
    this.forgotten[host]?.clear();
    this.dropped[host]?.clear();
    this.peerViews[host] = undefined;
  }

  /** The members' periodic loop: every host looks for work every pumpEveryMs. */
  tick(nowMs: number): void {
    if (nowMs < this.nextPumpMs) return;
    this.nextPumpMs = nowMs + (this.options.pumpEveryMs ?? FALLBACK_PUMP_EVERY_MS);
    for (let host = 0; host < this.options.hosts; host++) this.pump(host, nowMs);
  }

  private pump(host: number, atMs: number): void {
    if (this.dead.has(host) || this.isComplete(host)) return;
    const refreshMs = this.options.haveRefreshMs ?? FALLBACK_HAVE_REFRESH_MS;
    if (atMs - (this.refreshedAt[host] as number) >= refreshMs) this.refresh(host, atMs);
    // Bounded: each refusal forgets one peer, so a pump retries at most once per peer.
    const ring = this.ringOf(host, atMs);
    const view = this.viewOf(host, atMs, ring);
    // A chain's head reads the origin for the whole chain, as the scheduler had it do (the member's rule).
    const limits = {
      downloadsMax: this.options.downloadsMax,
      originReadsMax: view.ring?.head === true ? this.options.downloadsMax : this.options.originReadsMax,
    };
    for (let round = 0; round <= this.options.hosts; round++) {
      const picks = pickFallbackFetches(
        round === 0 ? view : this.viewOf(host, atMs, ring),
        limits,
        this.random,
      );
      if (picks.length === 0) return;
      let refused = false;
      for (const pick of picks) {
        const src = pick.source.kind === 'origin' ? this.options.originEndpoint : pick.source.peer;
        if (pick.source.kind === 'peer' && (this.uploads[src] ?? 0) >= this.options.uploadsMax) {
          this.busy++;
          const after = afterPeerFetch(this.busyStreaks[host]?.get(src) ?? 0, 'busy');
          this.busyStreaks[host]?.set(src, after.streak);
          this.forgotten[host]?.add(src);
          if (after.map === 'drop') this.dropped[host]?.add(src);
          this.peerViews[host] = undefined;
          refused = true;
          continue;
        }
        this.start(host, pick.piece, src, atMs);
      }
      if (!refused) return;
    }
  }

  /**
   * Ring mode: the host's ring as it sees it; a chain member whose feed closed first makes its
   * move (`orphanMove`): it subscribes to a peer, or leads the rest of the chain as its head.
   */
  private ringOf(host: number, atMs: number): FallbackView<number>['ring'] {
    const ring = this.options.ringView?.(host, atMs);
    this.actingHead.delete(host);
    if (ring === undefined) return undefined;
    if (ring.orphan && !this.orphans.has(host)) {
      // The member reads its peers' maps again before it moves: older ones show the chain as it was.
      this.orphans.add(host);
      this.refresh(host, atMs);
    }
    if (!ring.orphan) this.orphans.delete(host);
    if (ring.orphan) {
      const move = orphanMove(
        host,
        this.heldCount[host] as number,
        this.peerViews[host] ?? this.buildPeerView(host, atMs),
        ring.lastParent,
      );
      if (move.kind === 'head') {
        this.actingHead.add(host);
        return { fed: ring.fed, head: true, chain: true };
      }
      if (move.kind === 'subscribe' && this.options.subscribe?.(host, move.peer, atMs) === true)
        return this.ringOf(host, atMs);
    }
    return { fed: ring.fed, head: ring.head, chain: ring.chain };
  }

  private viewOf(host: number, nowMs: number, ring: FallbackView<number>['ring']): FallbackView<number> {
    const peers = this.peerViews[host] ?? this.buildPeerView(host, nowMs);
    const mine = this.arrivedAt[host] as Float64Array;
    const fetching = this.fetchingPieces[host] as Set<number>;
    // Its place among the live hosts, itself included (the members sort the peer URLs they know).
    let index = 0;
    for (let other = 0; other < host; other++) if (!this.dead.has(other)) index++;
    return {
      ...(ring === undefined ? {} : { ring }),
      stripe: { index, count: this.options.hosts - this.dead.size },
      ...this.rackStripeOf(host),
      pieceCount: this.options.pieceCount,
      holds: (piece) => (mine[piece] as number) !== Number.POSITIVE_INFINITY,
      fetching: (piece) => fetching.has(piece),
      urgent: new Set<number>(),
      peers,
      running: this.running[host] as number,
      originReads: this.originReads[host] as number,
    };
  }

  /** Its place among its live rack-mates, itself included, when hosts are in racks. */
  private rackStripeOf(host: number): { rackStripe?: { index: number; count: number } } {
    const rackOf = this.options.rackOf;
    if (rackOf === undefined) return {};
    const rack = rackOf(host);
    let index = 0;
    let count = 0;
    for (let other = 0; other < this.options.hosts; other++) {
      if (this.dead.has(other) || rackOf(other) !== rack) continue;
      if (other < host) index++;
      count++;
    }
    return { rackStripe: { index, count } };
  }

  private buildPeerView(host: number, nowMs: number): FallbackPeer<number>[] {
    const seenAt = this.refreshedAt[host] as number;
    const peers: FallbackPeer<number>[] = [];
    for (let peer = 0; peer < this.options.hosts; peer++) {
      if (peer === host || this.dead.has(peer)) continue;
      const arrived = this.arrivedAt[peer] as Float64Array;
      const refused = this.forgotten[host]?.has(peer) === true;
      if (this.dropped[host]?.has(peer) === true) {
        peers.push({ peer, pieces: undefined });
        continue;
      }
      peers.push({
        peer,
        pieces: { has: (piece: number) => (arrived[piece] as number) <= seenAt },
        ...(refused ? { busy: true } : {}),
        ...(this.options.ringPeer === undefined ? {} : { ring: this.ringPeerOf(peer, nowMs) }),
        ...(this.options.rackOf !== undefined && this.options.rackOf(peer) === this.options.rackOf(host)
          ? { sameRack: true }
          : {}),
      });
    }
    this.peerViews[host] = peers;
    return peers;
  }

  /** What a peer's have-map says of its ring; a host leading the rest of its chain reads for it. */
  private ringPeerOf(peer: number, nowMs: number): NonNullable<FallbackPeer<number>['ring']> {
    const ring = (this.options.ringPeer as NonNullable<FallbackSimOptions['ringPeer']>)(peer, nowMs);
    return this.actingHead.has(peer) ? { ...ring, flowing: true, head: true } : ring;
  }

  private start(dst: number, piece: number, src: number, atMs: number): void {
    const transferId = this.nextTransferId++;
    this.own.set(transferId, { dst, piece, src });
    this.fetchingPieces[dst]?.add(piece);
    // A peer that takes a fetch starts its busy count again (afterPeerFetch's 'verified').
    if (src !== this.options.originEndpoint) this.busyStreaks[dst]?.delete(src);
    this.running[dst] = (this.running[dst] ?? 0) + 1;
    if (src === this.options.originEndpoint) this.originReads[dst] = (this.originReads[dst] ?? 0) + 1;
    this.uploads[src] = (this.uploads[src] ?? 0) + 1;
    this.network.add(transferId, src, dst, this.options.pieceBytes(piece), atMs + this.options.latencyMs);
    this.transfers++;
  }
}
