/**
 * FallbackFetcher: the member's fetching while it has no scheduler. Every FALLBACK_PUMP_EVERY_MS
 * (and whenever one of its fetches ends) it refreshes the have-maps of the peers the scheduler last
 * named when they are older than FALLBACK_HAVE_REFRESH_MS, asks the pure fallback policy
 * (swarm/core/fallback.ts, the same one the simulator runs) what to fetch, and fetches it through
 * the PieceFetcher. It stops looking as soon as the member is registered again.
 */

import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  FALLBACK_HAVE_REFRESH_MS,
  FALLBACK_ORIGIN_READS_MAX,
  FALLBACK_PUMP_EVERY_MS,
  afterPeerFetch,
  orphanMove,
  pickFallbackFetches,
  ringFeedDelivers,
  type FallbackPeer,
  type FallbackView,
} from '../core/fallback.js';
import { Random } from '../core/random.js';
import type { ServiceAccess } from '../../auth/transport.js';
import type { PieceMap } from '../../piece/piece-map.js';
import { callJson } from '../wire/http-json.js';
import { decodeBitfield, haveSchema, parseMessage } from '../wire/protocol.js';
import type { MemberStore } from './member-store.js';
import type { PieceFetcher } from './piece-fetcher.js';

export interface FallbackFetcherOptions {
  model: string;
  map: PieceMap;
  store: MemberStore;
  fetcher: PieceFetcher;
  /** This host's base URL (its place among the peers decides its stripe of origin reads). */
  selfUrl: string;
  /** The cluster credential (and TLS) sent to peers. */
  access?: ServiceAccess | undefined;
  downloadsMax: number;
  /** Aborted when the member closes. */
  signal: AbortSignal;
  /** True while the member should fetch on its own (no registration, scheduler unreachable). */
  active(): boolean;
  /** True while it may fetch from peers only, not the origin (a registration that is slow, not lost). */
  peersOnly?(): boolean;
  knownPeers(): readonly string[];
  /** How many of the known peers, the first ones, share this host's rack (undefined: no racks). */
  rackPeers?(): number | undefined;
  urgent(): ReadonlySet<number>;
  /** Pieces an assigned fetch left over from the scheduler is still fetching. */
  fetchingAssigned(piece: number): boolean;
  /**
   * Ring mode: whether the feed from this host's ring parent is open and when it last pushed a
   * piece (performance.now() ms), and whether the scheduler said this host heads a chain and its
   * ring is a chain; `lostParent`, in a chain, the parent whose feed ended (none open since);
   * undefined outside ring mode.
   */
  ring?(): FallbackRing | undefined;
  /** Ring mode: subscribes to a ring parent of this host's own choosing (`orphanMove`). */
  subscribe?(url: string): void;
  /** Ring mode: told when this host starts to lead what is left of its chain (`orphanMove`). */
  leadsChain?(): void;
}

export interface FallbackRing {
  feedOpen: boolean;
  lastPushMs: number | undefined;
  head: boolean;
  chain: boolean;
  lostParent: string | undefined;
  /** When the feed ended (performance.now() ms): peers' maps older than that do not count. */
  lostAtMs: number | undefined;
}

export class FallbackFetcher {
  /** Each known peer's last have-map; `busy` once it turned a fetch away since (fallback.ts). */
  private readonly peerHave = new Map<
    string,
    { at: number; pieces: Set<number> | undefined; busy?: boolean; ring?: FallbackPeer<string>['ring'] }
  >();
  /** Busy answers in a row from each peer (0 once it serves a piece). */
  private readonly busyStreak = new Map<string, number>();
  private readonly fetching = new Set<number>();
  private running = 0;
  private originReads = 0;
  /** When the member last went on its own (performance.now() ms); undefined while it has a scheduler. */
  private onOwnSince: number | undefined;
  /** Ring mode: this host leads what is left of its chain (`orphanMove`), as of the last pump. */
  actingHead = false;
  /** The policy's generator: seeded here, where randomness is allowed (the policy has none). */
  private readonly random = new Random(randomInt(2 ** 31));

  constructor(private readonly options: FallbackFetcherOptions) {}

  /** Runs until the member closes or holds the model. */
  async run(): Promise<void> {
    const { signal, store } = this.options;
    while (!signal.aborted && !store.complete) {
      await sleep(FALLBACK_PUMP_EVERY_MS, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) continue;
      if (!this.options.active()) {
        this.onOwnSince = undefined;
        continue;
      }
      this.onOwnSince ??= performance.now();
      await this.refreshPeerHave();
      this.pump();
    }
  }

  private async refreshPeerHave(): Promise<void> {
    const now = performance.now();
    const { model, map, signal } = this.options;
    await Promise.all(
      this.options.knownPeers().map(async (peer) => {
        const known = this.peerHave.get(peer);
        const lostAtMs = this.options.ring?.()?.lostAtMs ?? Number.NEGATIVE_INFINITY;
        if (known !== undefined && now - known.at < FALLBACK_HAVE_REFRESH_MS && known.at >= lostAtMs) return;
        let pieces: Set<number> | undefined;
        let ring: FallbackPeer<string>['ring'];
        try {
          const raw = await callJson(`${peer}/v1/models/${model}/have`, 'a peer', {
            timeoutMs: 2000,
            signal,
            access: this.options.access,
          });
          const have = parseMessage(haveSchema, raw, 'have');
          pieces = new Set(decodeBitfield(have.have, map.pieceCount));
          ring = have.ring;
        } catch {
          pieces = undefined;
        }
        this.peerHave.set(peer, { at: now, pieces, ...(ring === undefined ? {} : { ring }) });
      }),
    );
  }

  private pump(): void {
    const { store, map, signal } = this.options;
    if (signal.aborted || !this.options.active()) return;
    const known = this.options.knownPeers();
    const rackCount = this.options.rackPeers?.();
    const rackMates = rackCount === undefined ? undefined : new Set(known.slice(0, rackCount));
    const peers: FallbackPeer<string>[] = known.map((peer) => {
      const have = this.peerHave.get(peer);
      return {
        peer,
        pieces: have?.pieces,
        ...(have?.busy === true ? { busy: true } : {}),
        ...(rackMates?.has(peer) === true ? { sameRack: true } : {}),
        ...(have?.ring === undefined ? {} : { ring: have.ring }),
      };
    });
    const everyone = [...new Set([...known, this.options.selfUrl])].sort();
    // Its place among its rack-mates, itself included, in the order they all agree on.
    const mates =
      rackMates === undefined ? undefined : [...new Set([...rackMates, this.options.selfUrl])].sort();
    const ring = this.ringView(peers);
    if (signal.aborted || !this.options.active()) return;
    const picks = pickFallbackFetches(
      {
        pieceCount: map.pieceCount,
        holds: (piece) => store.has(piece),
        fetching: (piece) => this.fetching.has(piece) || this.options.fetchingAssigned(piece),
        urgent: this.options.urgent(),
        peers,
        running: this.running,
        originReads: this.originReads,
        stripe: { index: everyone.indexOf(this.options.selfUrl), count: everyone.length },
        ...(mates === undefined
          ? {}
          : { rackStripe: { index: mates.indexOf(this.options.selfUrl), count: mates.length } }),
        ...(ring === undefined ? {} : { ring }),
      },
      {
        downloadsMax: this.options.downloadsMax,
        // A chain's head reads the origin for the whole chain, as the scheduler had it do.
        originReadsMax:
          this.options.peersOnly?.() === true
            ? 0
            : ring?.head === true
              ? this.options.downloadsMax
              : FALLBACK_ORIGIN_READS_MAX,
      },
      this.random,
    );
    for (const pick of picks)
      this.start(pick.piece, pick.source.kind === 'origin' ? 'origin' : pick.source.peer);
  }

  /**
   * The ring as the policy sees it. A chain member whose feed ended makes its move first
   * (`orphanMove`): it subscribes to a peer, or leads what is left of the chain as its head.
   */
  private ringView(peers: FallbackPeer<string>[]): FallbackView<string>['ring'] {
    const ring = this.options.ring?.();
    const wasActingHead = this.actingHead;
    this.actingHead = false;
    if (ring === undefined) return undefined;
    const now = performance.now();
    let head = ring.head;
    if (ring.lostParent !== undefined && !ring.feedOpen) {
      // Maps read before the feed ended show the chain as it was (its parent alive, the host ahead
      // still pushing to it): no move on those, and nothing fetched meanwhile.
      const lostAtMs = ring.lostAtMs ?? Number.NEGATIVE_INFINITY;
      const stale = peers.some(
        (peer) => (this.peerHave.get(peer.peer)?.at ?? Number.NEGATIVE_INFINITY) < lostAtMs,
      );
      if (stale) return { fed: true, head: false, chain: true };
      const move = orphanMove(this.options.selfUrl, this.options.store.heldCount, peers, ring.lostParent);
      if (move.kind === 'subscribe') {
        this.options.subscribe?.(move.peer);
        return this.ringView(peers.filter((peer) => peer.peer !== move.peer));
      }
      if (move.kind === 'head') {
        head = this.actingHead = true;
        if (!wasActingHead) this.options.leadsChain?.();
      }
    }
    return {
      fed: ringFeedDelivers(ring.feedOpen, ring.lastPushMs, this.onOwnSince ?? now, now),
      head,
      chain: ring.chain,
    };
  }

  private start(piece: number, source: string): void {
    const { fetcher, signal } = this.options;
    this.fetching.add(piece);
    this.running++;
    if (source === 'origin') this.originReads++;
    void fetcher
      .fetch(fetcher.newFetch(piece, new AbortController()), source, signal)
      .then((result) => {
        if (result.outcome === 'verified') fetcher.stats.fallbackPieces++;
        if (source === 'origin' || result.outcome === 'cancelled') return;
        // A peer that failed (gone, lying) is asked for its map again before it is used again; one
        // that was busy too, but meanwhile what it holds is still its (no origin read for it),
        // unless it has answered nothing but busy FALLBACK_BUSY_STREAK_MAX times in a row.
        const after = afterPeerFetch(
          this.busyStreak.get(source) ?? 0,
          result.outcome === 'verified' ? 'verified' : result.busy === true ? 'busy' : 'failed',
        );
        this.busyStreak.set(source, after.streak);
        const have = this.peerHave.get(source);
        if (after.map === 'busy' && have !== undefined) have.busy = true;
        else if (after.map !== 'keep') this.peerHave.delete(source);
      })
      .finally(() => {
        this.fetching.delete(piece);
        this.running--;
        if (source === 'origin') this.originReads--;
        this.pump();
      });
  }
}
