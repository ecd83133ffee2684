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
  pickFallbackFetches,
  ringFeedDelivers,
  type FallbackPeer,
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
  knownPeers(): readonly string[];
  /** How many of the known peers, the first ones, share this host's rack (undefined: no racks). */
  rackPeers?(): number | undefined;
  urgent(): ReadonlySet<number>;
  /** Pieces an assigned fetch left over from the scheduler is still fetching. */
  fetchingAssigned(piece: number): boolean;
  /**
   * Ring mode: whether the feed from this host's ring parent is open and when it last pushed a
   * piece (performance.now() ms), and whether the scheduler said this host heads a chain;
   * undefined outside ring mode.
   */
  ring?(): { feedOpen: boolean; lastPushMs: number | undefined; head: boolean } | undefined;
}

export class FallbackFetcher {
  /** Each known peer's last have-map; `busy` once it turned a fetch away since (fallback.ts). */
  private readonly peerHave = new Map<
    string,
    { at: number; pieces: Set<number> | undefined; busy?: boolean }
  >();
  /** Busy answers in a row from each peer (0 once it serves a piece). */
  private readonly busyStreak = new Map<string, number>();
  private readonly fetching = new Set<number>();
  private running = 0;
  private originReads = 0;
  /** When the member last went on its own (performance.now() ms); undefined while it has a scheduler. */
  private onOwnSince: number | undefined;
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
        if (known !== undefined && now - known.at < FALLBACK_HAVE_REFRESH_MS) return;
        let pieces: Set<number> | undefined;
        try {
          const raw = await callJson(`${peer}/v1/models/${model}/have`, 'a peer', {
            timeoutMs: 2000,
            signal,
            access: this.options.access,
          });
          const have = parseMessage(haveSchema, raw, 'have');
          pieces = new Set(decodeBitfield(have.have, map.pieceCount));
        } catch {
          pieces = undefined;
        }
        this.peerHave.set(peer, { at: now, pieces });
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
      };
    });
    const everyone = [...new Set([...known, this.options.selfUrl])].sort();
    // Its place among its rack-mates, itself included, in the order they all agree on.
    const mates =
      rackMates === undefined ? undefined : [...new Set([...rackMates, this.options.selfUrl])].sort();
    const ring = this.ringView();
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
        originReadsMax: ring?.head === true ? this.options.downloadsMax : FALLBACK_ORIGIN_READS_MAX,
      },
      this.random,
    );
    for (const pick of picks)
      this.start(pick.piece, pick.source.kind === 'origin' ? 'origin' : pick.source.peer);
  }

  private ringView(): { fed: boolean; head: boolean } | undefined {
    const ring = this.options.ring?.();
    if (ring === undefined) return undefined;
    const now = performance.now();
    return {
      fed: ringFeedDelivers(ring.feedOpen, ring.lastPushMs, this.onOwnSince ?? now, now),
      head: ring.head,
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
