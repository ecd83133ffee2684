/**
 * A swarm member: one model on one host. Three parts, each in its own module:
 *
 * - the scheduler session (scheduler-session.ts): registration, the sync channel, reports,
 *   heartbeats; it hands over assignments and cancellations as they arrive;
 * - the piece fetcher (piece-fetcher.ts): one piece from the origin or a peer into a reused buffer,
 *   verified and stored by the PieceStore;
 * - the fallback fetcher (fallback-fetcher.ts): while the scheduler is unreachable, the member picks
 *   its own fetches with the pure fallback policy (core/fallback.ts, also run by the simulator).
 *
 * This class runs the assignments: at most `downloadsMax` at once, each reported when it ends, with
 * a pipelining notice ("ending") shortly before, so the scheduler plans the next transfer while
 * this one finishes. A store that cannot write stops the model here for good (`failure`).
 *
 * Ring mode (swarm/core/ring-plan.ts): when the scheduler names a ring parent, the member subscribes
 * to it (ring-feed.ts) and stores what it pushes as it stores fetched pieces; it tells the scheduler
 * of those pieces in batches, and the parent of pieces it got another way (HAVE). Its own child's
 * subscription is served by the agent's peer-wire server from `heldBitfield` and `watchVerified`.
 */

import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError, isWeightcastError } from '../../errors.js';
import { PIECE_RETRIES_DEFAULT } from '../../piece/verify.js';
import type { Origin } from '../../origin/origin.js';
import type { Throttle } from '../../util/throttle.js';
import type { PieceMap } from '../../piece/piece-map.js';
import type { SyncReply, WireAssignment } from '../wire/protocol.js';
import { FallbackFetcher } from './fallback-fetcher.js';
import type { MemberStore } from './member-store.js';
import {
  PieceFetcher,
  firstByteOf,
  type Fetch,
  type FetchResult,
  type MemberStats,
  type PieceEvent,
} from './piece-fetcher.js';
import { SchedulerSession, type MemberIdentity } from './scheduler-session.js';
import { RingFeed } from './ring-feed.js';
import { newBitfield, setBit } from '../core/bitfield.js';
import { FALLBACK_FEED_QUIET_MS } from '../core/fallback.js';
import type { RecentBudget, RecentPieces } from './recent-pieces.js';

export type { MemberIdentity, MemberStats };

export interface MemberOptions {
  /** The manifest digest's hex: the model's name on the wire. */
  model: string;
  map: PieceMap;
  /** Canonical manifest bytes, sent with a registration (see manifestInlineBytesMax). */
  manifestBytes: Buffer;
  /** The piece store, or one still opening (OpeningStore, for a cache known to open empty). */
  store: MemberStore;
  origin: Origin;
  schedulerUrl: string;
  /** The cluster credential (and TLS) sent to the scheduler and to peers. */
  access?: ServiceAccess;
  identity: MemberIdentity;
  downloadThrottle: Throttle;
  /** Pieces fetched at once (assignments beyond it wait). Default 8. */
  downloadsMax?: number;
  /** A scheduler that sends nothing on the channel for this long is lost. Default 10 000 ms. */
  schedulerSilenceMs?: number;
  /** A registration unanswered this long sends a host with kept peers to them (REGISTRATION_SLOW_MS). */
  registrationSlowMs?: number;
  /** A peer that sends nothing for this long has failed the transfer. Default 10 000 ms. */
  peerIdleTimeoutMs?: number;
  /**
   * Read from peers over the peer wire (peer-wire-client.ts), falling back to HTTP for a peer that
   * does not speak it. Default true; false reads every peer over HTTP ranges, as before the wire.
   */
  peerWire?: boolean;
  /**
   * A manifest up to this many bytes rides along with every registration; a larger one is sent only
   * when the scheduler does not know the model yet. Default MANIFEST_INLINE_BYTES_MAX.
   */
  manifestInlineBytesMax?: number;
  /** Memory for recently verified runs, shared by an agent's models (PieceFetcherOptions.recentBudget). */
  recentBudget?: RecentBudget;
  /**
   * The peers this host knew when it last ran (the agent keeps them with the model): a member
   * restarted while the scheduler is gone fetches from them, not the origin alone.
   */
  peers?: readonly string[];
  /** The scheduler named the peers anew. */
  onPeers?: (peers: readonly string[]) => void;
  onEvent?: (event: MemberEvent) => void;
}

/** A pushed piece's bytes as they land (SwarmMember.watchArriving); `pin` holds its buffer. */
export interface RingArrivingListener {
  start(piece: number, bytes: Buffer, pin: () => () => void): void;
  progress(piece: number, filled: number): void;
  end(piece: number, whole: boolean): void;
}

export type MemberEvent =
  | { type: 'registered'; host: number; held: number }
  | { type: 'scheduler-lost'; reason: string }
  /** Ring mode: the feed from the ring parent ended with an error (the scheduler is told). */
  | { type: 'ring-lost'; parent: string; reason: string }
  /**
   * Ring mode, no scheduler: the chain feed ended and this host subscribed to `parent` on its own,
   * or (no parent) it leads what is left of its chain, reading the origin (fallback.ts orphanMove).
   */
  | { type: 'ring-own'; parent?: string }
  | PieceEvent
  | { type: 'complete' }
  | { type: 'failed'; code: string; reason: string };

/**
 * A scheduler that sends nothing for this long (it answers every heartbeat) is lost: stopped, hung
 * or cut off behind a socket that still looks open. The member carries on with its peers and the
 * origin and registers again. Default for MemberOptions.schedulerSilenceMs: two heartbeats
 * (2 s apart) unanswered and a second more. 10 s cost the chaos benchmark's stopped-scheduler row
 * (20 s of SIGSTOP) 28.8 s against 24.1 s with 5 s; the fan-out saw no false loss at 5 s.
 */
export const SCHEDULER_SILENCE_MS_DEFAULT = 5_000;

/**
 * A chain's head with no fetch running reads the origin on its own once the scheduler has been quiet
 * this long (a healthy scheduler answers its head's reports at once: it has every first copy to give).
 */
export const HEAD_ALONE_MS = 1000;
/**
 * A manifest up to this size rides along with every registration (a 256 MiB model in 512 KiB
 * pieces has a 41 KB one); a larger one (a 1 TB model's is megabytes) only when the scheduler does
 * not know the model yet.
 */
export const MANIFEST_INLINE_BYTES_MAX = 128 * 1024;
/**
 * Pipelining: a transfer whose remaining bytes, at the rate it has run so far, take less than the
 * lead time is announced as ending, so the scheduler plans the next download (and the parent's next
 * upload) while this one finishes. The lead is a few scheduler round trips, bounded. The transfer's
 * own progress decides, not an average over transfers: flows from the origin run several times
 * slower than flows from peers, and a notice sent too early lets the next transfer start long
 * before this one ends (measured: 10-27 origin transfers at once where the scheduler allowed 8).
 */
const ENDING_LEAD_MIN_MS = 30;
const ENDING_LEAD_MAX_MS = 250;
const ENDING_LEAD_ROUND_TRIPS = 3;
/** A transfer's progress is looked at again no sooner than this. */
const ENDING_RECHECK_MIN_MS = 5;
/** Bytes that ran for less than this are a burst, not a rate. */
const ENDING_SAMPLE_MIN_MS = 10;
/** A transfer's progress is looked at again no sooner than this many more bytes. */
const ENDING_WATCH_BYTES_MIN = 16 * 1024;

/**
 * Ring mode: a ring parent that says it has not joined the model yet is asked again this often, at
 * most this many times in a row (2 s in all) before the link is reported lost.
 */
const RING_REFUSAL_RETRY_MS = 100;
const RING_REFUSALS_MAX = 20;
/**
 * Ring mode: a feed whose connection closed or could not be made is opened again after
 * RING_REFUSAL_RETRY_MS, this many times with no piece pushed in between, before the link is
 * reported lost. Either the parent is gone (the scheduler bridges this host to the parent's parent,
 * at once when the parent's channel closed), or it is still there and dropped the feed because a
 * piece it passed on stopped arriving (its own parent died). Reported at once, both cut this host
 * out of its chain, and the hosts behind it starved (chaos, agents killed: 17-21 s instead of 13-14).
 */
const RING_RECONNECTS_MAX = 20;

/** Wrong copies of one piece from the origin that stop the model: as many as a pull from the origin allows. */
export const ORIGIN_CORRUPT_COPIES_MAX = PIECE_RETRIES_DEFAULT + 1;

interface AssignedFetch extends Fetch {
  /** Looks at the transfer's progress until it is nearly done; cleared when it ends. */
  endingTimer?: ReturnType<typeof setTimeout>;
  /** Its ending notice went out. */
  announced?: boolean;
}

export class SwarmMember {
  private readonly controller = new AbortController();
  /** Assigned transfers under way, by transfer id. */
  private readonly fetches = new Map<number, AssignedFetch>();
  /** How many assigned transfers are fetching each piece. */
  private readonly assignedPieces = new Map<number, number>();
  private readonly queue: WireAssignment[] = [];
  private readonly session: SchedulerSession;
  private readonly fetcher: PieceFetcher;
  private readonly fallback: FallbackFetcher;
  private completed = false;
  private running = 0;
  private loops: Promise<void>[] = [];
  private completeResolve!: () => void;
  private completeReject!: (error: Error) => void;
  /** Resolves when every piece is held; rejects with `failure` when the model had to stop. */
  readonly complete: Promise<void>;
  /**
   * Why this model stopped on this host: its store could not write (a full disk, an I/O error).
   * Fetching more would fail the same way, so the member leaves the swarm instead of retrying.
   */
  failure: WeightcastError | undefined;
  private readonly downloadsMax: number;
  /** Wrong copies of a piece the origin sent this host, by piece (see originSentWrongBytes). */
  private readonly originCorruptCopies = new Map<number, number>();
  /** Ring mode: the feed from the ring parent, and the parent's URL. */
  private ringFeed: RingFeed | undefined;
  private ringParent: string | undefined;
  /** Ring mode: the scheduler has named this host's ring parent, or said it has none. */
  private ringTold = false;
  /** Ring mode: the scheduler said this host heads a chain. */
  private ringHead = false;
  /** Ring mode: the scheduler said this host's ring is a chain. */
  private ringChain = false;
  /** Ring mode: the parent the scheduler named last (ringParent differs while `ringOwn`). */
  private ringPlanned: string | undefined;
  /** Ring mode: this host subscribed to a parent of its own choosing while the scheduler was gone. */
  private ringOwn = false;
  /** Ring mode: when the last feed ended on its own (performance.now() ms). */
  private ringEndedAt: number | undefined;
  /** Ring mode: when the feed last pushed a piece that verified (performance.now() ms). */
  private ringPushedAt: number | undefined;
  /** Subscriptions the parent refused as not yet joined to the model, in a row; the retry's timer. */
  private ringRefusals = 0;
  /** Ring feeds to the same parent opened again since one last pushed a piece. */
  private ringReconnects = 0;
  private ringRetry: ReturnType<typeof setTimeout> | undefined;
  /** Listeners for each piece verified here (a ring child's push session). */
  private readonly verifiedListeners = new Set<(piece: number) => void>();
  /** Listeners for pushed pieces' bytes as they land (a ring child's push session, cutting through). */
  private readonly arrivingListeners = new Set<RingArrivingListener>();

  constructor(private readonly options: MemberOptions) {
    this.downloadsMax = options.downloadsMax ?? 8;
    this.complete = new Promise<void>((resolve, reject) => {
      this.completeResolve = resolve;
      this.completeReject = reject;
    });
    // Waiters handle a failure; without any, it is still reported through `failure`.
    this.complete.catch(() => undefined);
    if (options.store.complete) {
      this.completed = true;
      this.completeResolve();
    }
    const signal = this.controller.signal;
    this.fetcher = new PieceFetcher({
      model: options.model,
      map: options.map,
      store: options.store,
      origin: options.origin,
      downloadThrottle: options.downloadThrottle,
      peerIdleTimeoutMs: options.peerIdleTimeoutMs ?? 10_000,
      peerWire: options.peerWire ?? true,
      access: options.access,
      onEvent: (event) => this.onPiece(event),
      onStoreFailure: (error) => this.fail(error),
      ...(options.recentBudget === undefined ? {} : { recentBudget: options.recentBudget }),
    });
    this.session = new SchedulerSession({
      model: options.model,
      map: options.map,
      manifestBytes: options.manifestBytes,
      store: options.store,
      schedulerUrl: options.schedulerUrl,
      access: options.access,
      identity: options.identity,
      schedulerSilenceMs: options.schedulerSilenceMs ?? SCHEDULER_SILENCE_MS_DEFAULT,
      ...(options.registrationSlowMs === undefined ? {} : { registrationSlowMs: options.registrationSlowMs }),
      manifestInlineBytesMax: options.manifestInlineBytesMax ?? MANIFEST_INLINE_BYTES_MAX,
      signal,
      isRunning: (transferId) => this.fetches.has(transferId),
      onReply: (reply) => this.apply(reply),
      onRegistered: (host) => {
        // Assignments of an earlier registration are void; their fetches may finish, but not report.
        this.queue.length = 0;
        options.onEvent?.({ type: 'registered', host, held: options.store.heldCount });
      },
      onLost: (reason, announce) => {
        this.queue.length = 0;
        if (announce) options.onEvent?.({ type: 'scheduler-lost', reason });
      },
      onRefused: (error) => this.fail(error),
      ...(options.peers === undefined ? {} : { peers: options.peers }),
      ...(options.onPeers === undefined ? {} : { onPeers: options.onPeers }),
    });
    this.fallback = new FallbackFetcher({
      model: options.model,
      map: options.map,
      store: options.store,
      fetcher: this.fetcher,
      selfUrl: options.identity.url,
      access: options.access,
      downloadsMax: this.downloadsMax,
      signal,
      active: () =>
        (this.session.host === undefined && (this.session.schedulerDown || this.session.registrationSlow)) ||
        this.headOnItsOwn(),
      // A registration that is only slow: the peers this host kept, not the origin (REGISTRATION_SLOW_MS).
      peersOnly: () => this.session.host === undefined && !this.session.schedulerDown,
      knownPeers: () => this.session.knownPeers,
      rackPeers: () => this.session.knownRackPeers,
      urgent: () => this.session.urgentSet,
      fetchingAssigned: (piece) => this.assignedPieces.has(piece),
      ring: () =>
        this.ringTold
          ? {
              feedOpen: this.ringFeed !== undefined,
              lastPushMs: this.ringPushedAt,
              head: this.ringHead,
              chain: this.ringChain,
              lostParent:
                this.ringChain && !this.ringHead && this.ringFeed === undefined ? this.ringParent : undefined,
              lostAtMs: this.ringEndedAt,
            }
          : undefined,
      subscribe: (url) => this.subscribeOnOwn(url),
      leadsChain: () => this.options.onEvent?.({ type: 'ring-own' }),
    });
  }

  get registeredHost(): number | undefined {
    return this.session.host;
  }

  get stats(): MemberStats {
    return this.fetcher.stats;
  }

  /** The runs this host verified last, kept in memory for uploads and local reads. */
  get recentPieces(): RecentPieces {
    return this.fetcher.recent;
  }

  start(): void {
    this.loops.push(this.session.run(), this.fallback.run());
  }

  /** Ring mode: the held pieces as a core bitfield (what a subscribing child is compared with). */
  heldBitfield(): Uint32Array {
    const { pieceCount } = this.options.map;
    const held = newBitfield(pieceCount);
    for (let piece = 0; piece < pieceCount; piece++) if (this.options.store.has(piece)) setBit(held, piece);
    return held;
  }

  /** Calls `listener` with every piece verified here from now on; returns the unsubscribe. */
  watchVerified(listener: (piece: number) => void): () => void {
    this.verifiedListeners.add(listener);
    return () => this.verifiedListeners.delete(listener);
  }

  /**
   * Calls `listener` as pieces pushed by the ring parent land, with a `pin` that keeps their buffer
   * out of the pool until released; returns the unsubscribe.
   */
  watchArriving(listener: RingArrivingListener): () => void {
    this.arrivingListeners.add(listener);
    return () => this.arrivingListeners.delete(listener);
  }

  /** The ring feed's pieces so far (tests, status). */
  get ringReceived(): number {
    return this.ringFeed?.received ?? 0;
  }

  /** Pieces a reader is blocked on: reported to the scheduler, fetched first. */
  urgent(pieces: readonly number[]): void {
    this.session.urgent(pieces);
  }

  /**
   * Stops the model on this host for good: every transfer, the scheduler session (the host leaves
   * the swarm, so nobody is assigned to fetch from or for it), and every waiter, with `error`.
   */
  private fail(error: WeightcastError): void {
    if (this.failure !== undefined || this.controller.signal.aborted) return;
    this.failure = error;
    this.options.onEvent?.({ type: 'failed', code: error.code, reason: error.message });
    this.completeReject(error);
    void this.close();
  }

  /** Stops the model on this host for good with `error` (a manifest found wrong after the join). */
  stopWith(error: WeightcastError): void {
    this.fail(error);
  }

  /** Leaves the swarm (politely, if the scheduler answers) and stops every transfer. */
  async close(): Promise<void> {
    if (this.controller.signal.aborted) return;
    this.controller.abort(new WeightcastError('ABORTED', 'the swarm member is closing'));
    this.setRingParent(undefined);
    this.verifiedListeners.clear();
    this.arrivingListeners.clear();
    for (const fetch of this.fetches.values()) fetch.controller.abort();
    await Promise.allSettled(this.loops);
    await this.fetcher.close();
    await this.session.leave();
  }

  private onPiece(event: PieceEvent): void {
    this.options.onEvent?.(event);
    if (event.outcome === 'corrupt' && event.from === 'origin') this.originSentWrongBytes(event.piece);
    if (event.outcome !== 'verified') return;
    this.session.held(event.piece);
    if (event.ring === true) {
      this.session.ringHeld(event.piece);
      this.ringReconnects = 0;
      this.ringPushedAt = performance.now();
    } else this.ringFeed?.have(event.piece);
    for (const listener of this.verifiedListeners) listener(event.piece);
    if (this.options.store.complete && !this.completed) {
      this.completed = true;
      // Nothing more to take from a ring parent; this host still pushes to its own child.
      this.setRingParent(undefined);
      this.completeResolve();
      this.options.onEvent?.({ type: 'complete' });
    }
  }

  /**
   * The origin is the only source of a piece no host holds: one that keeps sending wrong bytes for
   * it (a changed file, a broken proxy) would have it assigned from the origin again and again. As
   * a pull from the origin does, the model stops once the origin has failed the same piece
   * ORIGIN_CORRUPT_COPIES_MAX times here, with PIECE_HASH_MISMATCH.
   */
  private originSentWrongBytes(piece: number): void {
    const copies = (this.originCorruptCopies.get(piece) ?? 0) + 1;
    this.originCorruptCopies.set(piece, copies);
    if (copies < ORIGIN_CORRUPT_COPIES_MAX) return;
    const where = this.options.map.locate(piece);
    this.fail(
      new WeightcastError(
        'PIECE_HASH_MISMATCH',
        `${where.file.path} piece ${where.piece}: the origin sent wrong bytes ${copies} times (they do not match the manifest's SHA-256); nothing was written`,
        { file: where.file.path, piece: where.piece },
      ),
    );
  }

  // ---- assignments -----------------------------------------------------------------------------

  /**
   * Ring mode: subscribes to `url` (undefined: to nobody), ending the feed from the old parent. A
   * feed that fails is reported to the scheduler, which cuts the link and plans this host per piece.
   */
  private setRingParent(url: string | undefined): void {
    if (url === this.ringParent && (url === undefined || this.ringFeed !== undefined)) return;
    if (url !== this.ringParent) {
      this.ringRefusals = 0;
      this.ringReconnects = 0;
    }
    this.ringParent = url;
    clearTimeout(this.ringRetry);
    this.ringRetry = undefined;
    const old = this.ringFeed;
    this.ringFeed = undefined;
    old?.close();
    if (url === undefined || this.controller.signal.aborted || this.completed) return;
    const { map, access } = this.options;
    const feed: RingFeed = new RingFeed({
      url,
      model: this.options.model,
      pieceCount: map.pieceCount,
      helloTimeoutMs: this.options.peerIdleTimeoutMs ?? 10_000,
      tls: access?.tls,
      ...(access?.token === undefined ? {} : { credential: Buffer.from(access.token, 'utf8') }),
      held: () => this.heldBitfield(),
      pieceLength: (piece) => map.pieceLength(piece),
      bufferFor: (_piece, length) => this.fetcher.bufferFor(length),
      onPiece: (piece, bytes) => this.fetcher.storePushed(piece, bytes, url),
      arriving: {
        start: (piece, bytes) => {
          for (const listener of this.arrivingListeners)
            listener.start(piece, bytes, () => this.fetcher.pin(bytes));
        },
        progress: (piece, filled) => {
          for (const listener of this.arrivingListeners) listener.progress(piece, filled);
        },
        end: (piece, whole) => {
          for (const listener of this.arrivingListeners) listener.end(piece, whole);
        },
      },
      onEnd: (error) => {
        if (this.ringFeed !== feed) return;
        this.ringFeed = undefined;
        this.ringEndedAt = performance.now();
        if (error === undefined || this.controller.signal.aborted) return;
        // A parent that does not serve the model yet (one whose store is still opening serves it
        // already: Agent.opening; an agent that was restarted and is resuming it does not): asked
        // again shortly, a few times, before the link is given up.
        if (isWeightcastError(error, 'SWARM_UNKNOWN_MODEL') && this.ringRefusals < RING_REFUSALS_MAX) {
          this.ringRefusals++;
          this.resubscribeSoon(url);
          return;
        }
        // A connection that closed or failed: the same parent again, or the one the scheduler names.
        // Without a scheduler the fallback's move decides (orphanMove): it subscribes again to a
        // parent that answers and is still in a chain, not to one that came back from a restart
        // outside it (chaos stop-scheduler-kill, the head killed: its child took the restarted
        // head's feed, and the chain ran at what that host fetched on its own, 21-22 s).
        if (
          isWeightcastError(error, 'ORIGIN_IO') &&
          this.ringReconnects < RING_RECONNECTS_MAX &&
          !this.session.schedulerDown
        ) {
          this.ringReconnects++;
          this.resubscribeSoon(url);
          return;
        }
        const index = error.code === 'PIECE_HASH_MISMATCH' ? error.details['index'] : undefined;
        this.session.ringLost(error.message, url, typeof index === 'number' ? index : undefined);
        this.options.onEvent?.({ type: 'ring-lost', parent: url, reason: error.message });
      },
    });
    this.ringFeed = feed;
  }

  /**
   * Without a scheduler, a chain member whose feed ended subscribes to the peer it chose
   * (fallback.ts `orphanMove`); the feed counts as delivering for FALLBACK_FEED_QUIET_MS from now.
   */
  private subscribeOnOwn(url: string): void {
    this.ringOwn = true;
    this.setRingParent(url);
    this.ringPushedAt = performance.now();
    this.options.onEvent?.({ type: 'ring-own', parent: url });
  }

  /** Ring mode: whether this host reads the origin for its chain (told so, or on its own), for its have-map. */
  get ringReadsForChain(): boolean {
    return this.ringHead || this.fallback.actingHead;
  }

  /** Ring mode: the parent whose feed is open now, for its have-map. */
  get ringFeedParent(): string | undefined {
    return this.ringFeed === undefined ? undefined : this.ringParent;
  }

  /**
   * Ring mode: whether pieces keep coming to this host (its feed delivered in the last
   * FALLBACK_FEED_QUIET_MS, or it reads the origin for its chain), for its have-map; undefined
   * outside ring mode.
   */
  ringFlowing(): boolean | undefined {
    if (!this.ringTold) return undefined;
    if (this.ringHead || this.fallback.actingHead) return true;
    const last = this.ringPushedAt;
    return (
      this.ringFeed !== undefined && last !== undefined && performance.now() - last < FALLBACK_FEED_QUIET_MS
    );
  }

  /**
   * A chain's head reads the origin for everyone behind it. With no fetch running and the scheduler
   * quiet for HEAD_ALONE_MS it reads on its own (the fallback policy, every piece its), not after
   * the scheduler's full silence: the whole chain would idle that long.
   */
  private headOnItsOwn(): boolean {
    return this.ringHead && this.running === 0 && this.session.silentMs() > HEAD_ALONE_MS;
  }

  /** Subscribes to `url` again in RING_REFUSAL_RETRY_MS, unless the parent changed by then. */
  private resubscribeSoon(url: string): void {
    this.ringRetry = setTimeout(() => {
      this.ringRetry = undefined;
      // The same parent: setRingParent opens a feed again and keeps the counts of tries.
      if (this.ringParent === url && this.ringFeed === undefined) this.setRingParent(url);
    }, RING_REFUSAL_RETRY_MS);
    this.ringRetry.unref();
  }

  private apply(reply: SyncReply): void {
    if (reply.ring !== undefined) {
      this.ringTold = true;
      this.ringHead = reply.ring.parent === undefined && reply.ring.head === true;
      this.ringChain = reply.ring.chain === true || this.ringHead;
      this.ringPlanned = reply.ring.parent;
      this.ringOwn = false;
      this.setRingParent(reply.ring.parent);
    } else if (this.ringOwn) {
      // The scheduler is back: its plan again (it moves a parent that is gone).
      this.ringOwn = false;
      this.setRingParent(this.ringPlanned);
    }
    for (const transferId of reply.cancellations) {
      this.fetches.get(transferId)?.controller.abort();
      const queued = this.queue.findIndex((a) => a.transferId === transferId);
      if (queued >= 0) this.queue.splice(queued, 1);
    }
    for (const assignment of reply.assignments) {
      if (!withinOneFile(this.options.map, assignment.piece, assignment.count ?? 1)) continue;
      if (missingRuns(assignment.piece, assignment.count ?? 1, this.options.store).length === 0) {
        this.session.report({ transferId: assignment.transferId, outcome: 'verified' });
        continue;
      }
      this.queue.push(assignment);
    }
    this.pump();
  }

  private pump(): void {
    while (this.running < this.downloadsMax && this.queue.length > 0) {
      const assignment = this.queue.shift() as WireAssignment;
      this.running++;
      void this.runAssignment(assignment).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async runAssignment(assignment: WireAssignment): Promise<void> {
    const host = this.session.host;
    // The member's close aborts every fetch's controller (close()), so one signal is enough.
    const controller = new AbortController();
    if (this.controller.signal.aborted) return;
    const { transferId, piece } = assignment;
    const count = assignment.count ?? 1;
    const runs = missingRuns(piece, count, this.options.store);
    for (let p = piece; p < piece + count; p++)
      this.assignedPieces.set(p, (this.assignedPieces.get(p) ?? 0) + 1);
    let fetch: AssignedFetch | undefined;
    try {
      const source = assignment.from === 'origin' ? 'origin' : assignment.from;
      let result: FetchResult = { outcome: 'verified' };
      for (let index = 0; index < runs.length && result.outcome === 'verified'; index++) {
        const [first, pieces] = runs[index] as [number, number];
        clearTimeout(fetch?.endingTimer);
        fetch = this.fetcher.newFetch(first, controller, pieces);
        this.fetches.set(transferId, fetch);
        // The pipelining notice looks at the transfer's last run (a unit lacking pieces between
        // held ones has several; usually there is one).
        if (index === runs.length - 1) this.watchForEnding(transferId, fetch);
        result = await this.fetcher.fetch(fetch, source, controller.signal);
      }
      if (controller.signal.aborted || this.session.host !== host) return;
      const { outcome, bytesPerSecond } = result;
      // A verified transfer whose notice went out frees nothing the scheduler still waits for.
      this.session.report(
        { transferId, outcome, ...(bytesPerSecond === undefined ? {} : { bytesPerSecond }) },
        outcome === 'verified' && fetch?.announced === true,
      );
    } finally {
      clearTimeout(fetch?.endingTimer);
      this.session.forgetEnding(transferId);
      this.fetches.delete(transferId);
      for (let p = piece; p < piece + count; p++) {
        const left = (this.assignedPieces.get(p) ?? 1) - 1;
        if (left > 0) this.assignedPieces.set(p, left);
        else this.assignedPieces.delete(p);
      }
    }
  }

  private endingLeadMs(): number {
    const rounds = ENDING_LEAD_ROUND_TRIPS * (this.session.roundTripMs ?? 0);
    return Math.min(ENDING_LEAD_MAX_MS, Math.max(ENDING_LEAD_MIN_MS, rounds));
  }

  /**
   * The pipelining notice: looks at the transfer shortly after its first byte lands (HTTP sources
   * and the peer wire say when; a request queued behind another on the peer's one connection may
   * wait a while), or one lead after the start for a source that does not say; from then on as its
   * bytes arrive: when, at the rate they have arrived since the first, it should be one lead time
   * from its end, it is announced as ending. Two timers per transfer at most; the rest rides on the
   * reads (ReadProgress.watchAt), which cost a comparison each (timers cost ~2 % of an agent's CPU).
   */
  private watchForEnding(transferId: number, fetch: AssignedFetch): void {
    const check = (): void => {
      if (this.fetches.get(transferId) !== fetch) return;
      clearTimeout(fetch.endingTimer);
      const progress = fetch.progress;
      const landed = fetch.landedBefore + progress.filled;
      const elapsedMs = performance.now() - firstByteOf(fetch);
      const next = endingCheck(landed, fetch.length, elapsedMs, this.endingLeadMs());
      if (next === 'ending') {
        fetch.announced = true;
        this.session.ending(transferId);
        return;
      }
      if (progress.firstByteMs === undefined || landed <= 0 || elapsedMs < ENDING_SAMPLE_MIN_MS) {
        lookAt(next);
        return;
      }
      // Look again once `next` ms of bytes have landed at the rate so far, before the last byte.
      const ahead = Math.ceil((landed / elapsedMs) * next);
      const left = fetch.length - landed;
      progress.watchAt = progress.filled + Math.min(left - 1, Math.max(ENDING_WATCH_BYTES_MIN, ahead));
      progress.onWatch = check;
    };
    const lookAt = (delayMs: number): void => {
      clearTimeout(fetch.endingTimer);
      fetch.endingTimer = setTimeout(check, delayMs);
      fetch.endingTimer.unref();
    };
    fetch.progress.onFirstByte = () => lookAt(ENDING_SAMPLE_MIN_MS);
    lookAt(this.endingLeadMs());
  }
}

/** Whether pieces [piece, piece + count) exist and lie in one file (a transfer unit never spans two). */
export function withinOneFile(map: PieceMap, piece: number, count: number): boolean {
  if (!Number.isSafeInteger(piece) || piece < 0 || count < 1 || piece + count > map.pieceCount) return false;
  const where = map.locate(piece);
  return where.piece + count <= where.file.pieces.length;
}

/**
 * The pieces of [piece, piece + count) that `store` lacks, as runs [first, length] of consecutive
 * pieces: each run is fetched as one range, and a piece held (verified before a restart, say) is
 * never fetched again.
 */
export function missingRuns(
  piece: number,
  count: number,
  store: Pick<MemberStore, 'has'>,
): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  for (let p = piece; p < piece + count; p++) {
    if (store.has(p)) continue;
    const last = runs[runs.length - 1];
    if (last !== undefined && last[0] + last[1] === p) last[1]++;
    else runs.push([p, 1]);
  }
  return runs;
}

/**
 * Whether a transfer is one lead time from its end, judged by its own progress: `landed` of
 * `length` bytes in the `elapsedMs` since its first byte. Returns 'ending', or how long to wait
 * before looking again: one lead while no byte has landed (the first byte's arrival also triggers a
 * look); a few ms when the bytes have run too briefly to give a rate; else until one lead before the
 * end at the rate so far, but no longer than half the time left (the flow's share of its links
 * changes as other flows come and go).
 */
export function endingCheck(
  landed: number,
  length: number,
  elapsedMs: number,
  leadMs: number,
): 'ending' | number {
  if (landed >= length) return 'ending';
  if (landed <= 0) return Math.max(ENDING_RECHECK_MIN_MS, leadMs);
  if (elapsedMs < ENDING_SAMPLE_MIN_MS)
    return Math.max(ENDING_RECHECK_MIN_MS, ENDING_SAMPLE_MIN_MS - elapsedMs);
  const remainingMs = ((length - landed) * elapsedMs) / landed;
  if (remainingMs <= leadMs) return 'ending';
  return Math.max(ENDING_RECHECK_MIN_MS, Math.min(remainingMs - leadMs, remainingMs / 2));
}
