/**
 * A swarm member: one model on one host. It registers with the scheduler and holds a sync channel
 * to it (wire/sync-channel.ts): assignments and cancellations arrive on it as they are made; reports,
 * ending notices (pipelining), urgent pieces and a heartbeat go out on it. It fetches each assigned
 * piece from the named peer or the origin under the host's download cap and hands the bytes to the
 * PieceStore, which verifies them against the manifest before writing.
 *
 * Without a scheduler (unreachable, restarting) the member keeps going on its own: it asks the
 * peers it last heard of which pieces they hold and fetches missing pieces from them, falling back
 * to the origin for pieces no known peer has, while it keeps trying to register again.
 */

import { randomInt } from 'node:crypto';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { WeightcastError, isWeightcastError } from '../../errors.js';
import { isFinalOriginError, type Origin, type ReadProgress } from '../../origin/origin.js';
import type { Throttle } from '../../util/throttle.js';
import type { PieceMap } from '../../piece/piece-map.js';
import {
  decodeBitfield,
  encodeBitfield,
  haveSchema,
  parseMessage,
  registeredSchema,
  syncReplySchema,
  SYNC_ITEMS_MAX,
  type Register,
  type Report,
  type WireAssignment,
} from '../wire/protocol.js';
import { callJson } from '../wire/http-json.js';
import { FrameReader, encodeFrame, frameError, openChannel } from '../wire/sync-channel.js';
import type { MemberStore } from './member-store.js';
import { PeerReader } from './peer-reader.js';

export interface MemberIdentity {
  name: string;
  /** Base URL of this host's piece server, as peers reach it. */
  url: string;
  zone?: string;
  rack?: string;
  uploadBytesPerSecond: number;
  downloadBytesPerSecond: number;
}

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
  identity: MemberIdentity;
  downloadThrottle: Throttle;
  /** Pieces fetched at once (assignments beyond it wait). Default 8. */
  downloadsMax?: number;
  /** A scheduler that sends nothing on the channel for this long is lost. Default 10 000 ms. */
  schedulerSilenceMs?: number;
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
  onEvent?: (event: MemberEvent) => void;
}

export type MemberEvent =
  | { type: 'registered'; host: number; held: number }
  | { type: 'scheduler-lost'; reason: string }
  | {
      type: 'piece';
      piece: number;
      from: 'origin' | 'peer';
      outcome: Report['outcome'];
      bytes: number;
      /** How long the fetch took, from the request to the last byte. */
      ms: number;
      /** Then how long verifying and storing took (absent when no bytes were stored). */
      verifyMs?: number;
      /** Of `ms`, the time until the first byte landed (queueing, request travel, the parent's start). */
      waitMs?: number;
      /** The peer's base URL (absent for the origin). */
      parent?: string;
    }
  | { type: 'complete' }
  | { type: 'failed'; code: string; reason: string };

export interface MemberStats {
  /** Verified bytes stored from the origin and from peers; copies that arrived twice are not counted. */
  originBytes: number;
  peerBytes: number;
  corruptPieces: number;
  failedTransfers: number;
  fallbackPieces: number;
  /** Bytes of pieces that arrived after another copy was already stored (hedges, races). */
  duplicateBytes: number;
}

const REGISTER_RETRY_MS = 500;
/** An empty sync this often on the channel: the heartbeat (well inside the scheduler's host timeout). */
const HEARTBEAT_MS = 2000;
/**
 * A scheduler that sends nothing for this long (it answers every heartbeat) is lost: stopped, hung
 * or cut off behind a socket that still looks open. The member carries on with its peers and the
 * origin and registers again. Default for MemberOptions.schedulerSilenceMs.
 */
export const SCHEDULER_SILENCE_MS_DEFAULT = 10_000;
const REGISTER_RETRY_MAX_MS = 2000;
const SCHEDULER_TIMEOUT_MS = 10_000;
/**
 * A manifest up to this size rides along with every registration (a 256 MiB model in 512 KiB
 * pieces has a 41 KB one); a larger one (a 1 TB model's is megabytes) only when the scheduler does
 * not know the model yet.
 */
export const MANIFEST_INLINE_BYTES_MAX = 128 * 1024;
const PEER_HAVE_REFRESH_MS = 1000;
const FALLBACK_ORIGIN_READS_MAX = 2;
/** Chunk of a capped read: small enough to keep the cap smooth, large enough to be cheap. */
const READ_CHUNK_CAPPED_BYTES = 512 * 1024;
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
/** Weight of the newest sample in the running estimate of the scheduler round trip. */
const EWMA_WEIGHT = 0.2;

interface Fetch {
  piece: number;
  controller: AbortController;
  started: number;
  length: number;
  /** Bytes of the piece landed before the read in progress (capped reads go in chunks). */
  landedBefore: number;
  /** The read in progress counts its landed bytes here (OriginCallOptions.progress). */
  progress: ReadProgress;
  /**
   * When the piece's first byte landed. A request pipelined behind another on the peer's one
   * connection waits for it first: the transfer's rate is counted from here, not from `started`.
   */
  firstByteMs?: number;
  /** Looks at the transfer's progress until it is nearly done; cleared when it ends. */
  endingTimer?: ReturnType<typeof setTimeout>;
}

export class SwarmMember {
  readonly stats: MemberStats = {
    duplicateBytes: 0,
    originBytes: 0,
    peerBytes: 0,
    corruptPieces: 0,
    failedTransfers: 0,
    fallbackPieces: 0,
  };
  private host: number | undefined;
  private readonly controller = new AbortController();
  private readonly fetches = new Map<number, Fetch>();
  private readonly queue: WireAssignment[] = [];
  private readonly reports: Report[] = [];
  private readonly urgentPieces = new Set<number>();
  /** Transfers to announce as ending on the next sync. */
  private readonly endingNotices = new Set<number>();
  /** Running estimate of a short sync's round trip. */
  private syncRoundTripMs: number | undefined;
  /** When the oldest unanswered report or notice went out (for the round-trip estimate). */
  private roundTripFrom: number | undefined;
  /** The open sync channel to the scheduler, if any. */
  private channel: Socket | undefined;
  private flushQueued = false;
  private completed = false;
  /** Set when the scheduler stopped answering; the member then fetches on its own. */
  private schedulerDown = false;
  private running = 0;
  private fallbackRunning = 0;
  private fallbackOriginReads = 0;
  private readonly fallbackPieces = new Set<number>();
  private knownPeers: string[] = [];
  private peerHave = new Map<string, { at: number; pieces: Set<number> | undefined }>();
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
  /** Piece buffers, reused: fresh multi-MiB allocations cost page faults and GC on every piece. */
  private readonly buffers: Buffer[] = [];
  /** One reader per peer (a persistent connection), reading pieces straight into the buffers. */
  private readonly peers = new Map<string, PeerReader>();
  /** File path to manifest index, for the peer readers. */
  private readonly fileIndex: ReadonlyMap<string, number>;

  constructor(private readonly options: MemberOptions) {
    this.downloadsMax = options.downloadsMax ?? 8;
    this.fileIndex = new Map(options.map.manifest.files.map((file, index) => [file.path, index]));
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
  }

  get registeredHost(): number | undefined {
    return this.host;
  }

  start(): void {
    this.loops.push(this.controlLoop(), this.fallbackLoop());
  }

  /** Pieces a reader is blocked on: reported to the scheduler, fetched first. */
  urgent(pieces: readonly number[]): void {
    let added = false;
    for (const piece of pieces) {
      if (this.options.store.has(piece) || this.urgentPieces.has(piece)) continue;
      this.urgentPieces.add(piece);
      added = true;
    }
    if (added) this.flushReports();
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

  /** Leaves the swarm (politely, if the scheduler answers) and stops every transfer. */
  async close(): Promise<void> {
    if (this.controller.signal.aborted) return;
    this.controller.abort(new WeightcastError('ABORTED', 'the swarm member is closing'));
    for (const fetch of this.fetches.values()) fetch.controller.abort();
    await Promise.allSettled(this.loops);
    await Promise.allSettled([...this.peers.values()].map((client) => client.close()));
    this.peers.clear();
    const host = this.host;
    this.host = undefined;
    if (host !== undefined) {
      await callJson(`${this.swarmUrl()}/hosts/${host}`, 'the scheduler', {
        method: 'DELETE',
        timeoutMs: 2000,
      }).catch(() => undefined);
    }
  }

  // ---- scheduler -------------------------------------------------------------------------------

  private swarmUrl(): string {
    return `${this.options.schedulerUrl.replace(/\/+$/, '')}/v1/swarms/${this.options.model}`;
  }

  private async controlLoop(): Promise<void> {
    const signal = this.controller.signal;
    let backoff = REGISTER_RETRY_MS;
    while (!signal.aborted) {
      try {
        if (this.host === undefined) {
          await this.register();
          backoff = REGISTER_RETRY_MS;
          continue;
        }
        await this.runChannel(this.host);
      } catch (error) {
        if (signal.aborted) return;
        this.loseScheduler(error);
        await sleep(backoff, undefined, { signal }).catch(() => undefined);
        backoff = Math.min(REGISTER_RETRY_MAX_MS, backoff * 2);
      }
    }
  }

  /**
   * Holds the sync channel open until it breaks (which throws) or the member closes: replies
   * arriving on it are applied, reports go out on it as they happen, an empty sync every
   * heartbeat period tells the scheduler this host is alive.
   */
  private async runChannel(host: number): Promise<void> {
    const signal = this.controller.signal;
    const { socket, head } = await openChannel(`${this.swarmUrl()}/hosts/${host}/channel`, signal);
    socket.setNoDelay(true);
    const reader = new FrameReader();
    let heartbeat: ReturnType<typeof setInterval> | undefined;
    let heardMs = performance.now();
    const silenceMs = this.options.schedulerSilenceMs ?? SCHEDULER_SILENCE_MS_DEFAULT;
    try {
      await new Promise<void>((resolve, reject) => {
        const onData = (chunk: Buffer): void => {
          heardMs = performance.now();
          try {
            for (const frame of reader.push(chunk)) {
              const error = frameError(frame, 'the scheduler');
              if (error !== undefined) throw error;
              if (this.host !== host) continue;
              if (this.roundTripFrom !== undefined) {
                this.syncRoundTripMs = ewma(this.syncRoundTripMs, performance.now() - this.roundTripFrom);
                this.roundTripFrom = undefined;
              }
              this.apply(parseMessage(syncReplySchema, frame, 'sync reply'));
            }
          } catch (error) {
            reject(error instanceof Error ? error : new Error(String(error)));
            socket.destroy();
          }
        };
        const onAbort = (): void => {
          socket.destroy();
          resolve();
        };
        signal.addEventListener('abort', onAbort, { once: true });
        socket.on('data', onData);
        socket.on('error', () => undefined);
        socket.on('close', () => {
          signal.removeEventListener('abort', onAbort);
          if (this.channel === socket) this.channel = undefined;
          reject(new WeightcastError('SCHEDULER_UNREACHABLE', 'the sync channel to the scheduler closed'));
        });
        this.channel = socket;
        heartbeat = setInterval(
          () => {
            if (performance.now() - heardMs > silenceMs) {
              reject(
                new WeightcastError(
                  'SCHEDULER_UNREACHABLE',
                  `the scheduler sent nothing for ${Math.round(silenceMs / 1000)} s`,
                ),
              );
              socket.destroy();
              return;
            }
            this.send(true);
          },
          Math.min(HEARTBEAT_MS, silenceMs / 2),
        );
        if (head.length > 0) onData(head);
        // Reports held while there was no channel go out now; an empty sync if there are none.
        this.send(true);
      });
    } finally {
      clearInterval(heartbeat);
      if (this.channel === socket) this.channel = undefined;
      socket.destroy();
    }
  }

  private async register(): Promise<void> {
    const { store, map, identity } = this.options;
    const message: Register = {
      name: identity.name,
      url: identity.url,
      uploadBytesPerSecond: identity.uploadBytesPerSecond,
      downloadBytesPerSecond: identity.downloadBytesPerSecond,
      have: encodeBitfield(map.pieceCount, (piece) => store.has(piece)),
      assignmentsInReply: true,
      ...(identity.zone === undefined ? {} : { zone: identity.zone }),
      ...(identity.rack === undefined ? {} : { rack: identity.rack }),
    };
    const post = (withManifest: boolean): Promise<unknown> =>
      callJson(`${this.swarmUrl()}/hosts`, 'the scheduler', {
        method: 'POST',
        body: withManifest ? { ...message, manifest: this.options.manifestBytes.toString('utf8') } : message,
        timeoutMs: SCHEDULER_TIMEOUT_MS,
        signal: this.controller.signal,
      });
    // A small manifest goes with the first try: agents joining a new model together would otherwise
    // each be told the model is unknown and ask again. A large one is sent only when asked for.
    const inline =
      this.options.manifestBytes.length <= (this.options.manifestInlineBytesMax ?? MANIFEST_INLINE_BYTES_MAX);
    let raw: unknown;
    try {
      raw = await post(inline);
    } catch (error) {
      if (inline || !isWeightcastError(error, 'SWARM_UNKNOWN_MODEL')) throw error;
      raw = await post(true);
    }
    const registered = parseMessage(registeredSchema, raw, 'register reply');
    // Assignments of an earlier registration are void; their fetches may finish, but not report.
    this.queue.length = 0;
    this.reports.length = 0;
    this.host = registered.host;
    this.schedulerDown = false;
    this.options.onEvent?.({ type: 'registered', host: registered.host, held: store.heldCount });
    // The first transfers start now; their reports wait for the channel, which opens next.
    if (registered.assignments !== undefined && registered.assignments.length > 0) {
      this.apply({ assignments: registered.assignments, cancellations: [], peers: [] });
    }
  }

  private loseScheduler(error: unknown): void {
    const reason = error instanceof Error ? error.message : String(error);
    if (this.host !== undefined || !isWeightcastError(error, 'SCHEDULER_UNREACHABLE')) {
      this.options.onEvent?.({ type: 'scheduler-lost', reason });
    }
    this.host = undefined;
    this.queue.length = 0;
    // Only an unreachable scheduler sends the member out on its own; a refusal just re-registers.
    if (isWeightcastError(error, 'SCHEDULER_UNREACHABLE')) this.schedulerDown = true;
  }

  /** Sends what is waiting (reports, ending notices, urgent pieces) on the next microtask, batched. */
  private flushReports(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    queueMicrotask(() => {
      this.flushQueued = false;
      this.send(false);
    });
  }

  /** Writes one sync frame if there is a channel and something to say (or `always`: a heartbeat). */
  private send(always: boolean): void {
    const channel = this.channel;
    if (channel === undefined || channel.destroyed || this.host === undefined) return;
    const ending = [...this.endingNotices].filter((transferId) => this.fetches.has(transferId));
    this.endingNotices.clear();
    this.urgentSent();
    const urgent = [...this.urgentPieces];
    if (!always && this.reports.length === 0 && ending.length === 0 && urgent.length === 0) return;
    const reports = this.reports.splice(0, SYNC_ITEMS_MAX);
    if (reports.length > 0 || ending.length > 0) this.roundTripFrom ??= performance.now();
    channel.write(
      encodeFrame({
        reports,
        waitMs: 0,
        ...(urgent.length > 0 ? { urgent: urgent.slice(0, SYNC_ITEMS_MAX) } : {}),
        ...(ending.length > 0 ? { ending: ending.slice(0, SYNC_ITEMS_MAX) } : {}),
      }),
    );
    if (this.reports.length > 0) this.flushReports();
  }

  private urgentSent(): void {
    // Urgent pieces are re-sent with every sync until held; the core ignores repeats.
    for (const piece of this.urgentPieces) if (this.options.store.has(piece)) this.urgentPieces.delete(piece);
  }

  private apply(reply: { assignments: WireAssignment[]; cancellations: number[]; peers: string[] }): void {
    if (reply.peers.length > 0) this.knownPeers = reply.peers;
    for (const transferId of reply.cancellations) {
      this.fetches.get(transferId)?.controller.abort();
      const queued = this.queue.findIndex((a) => a.transferId === transferId);
      if (queued >= 0) this.queue.splice(queued, 1);
    }
    for (const assignment of reply.assignments) {
      if (assignment.piece >= this.options.map.pieceCount) continue;
      if (this.options.store.has(assignment.piece)) {
        this.report({ transferId: assignment.transferId, outcome: 'verified' });
        continue;
      }
      this.queue.push(assignment);
    }
    this.pump();
  }

  private report(report: Report): void {
    this.reports.push(report);
    this.flushReports();
  }

  // ---- transfers -------------------------------------------------------------------------------

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
    const host = this.host;
    const controller = new AbortController();
    const signal = AbortSignal.any([controller.signal, this.controller.signal]);
    const fetch = this.newFetch(assignment.piece, controller);
    this.fetches.set(assignment.transferId, fetch);
    this.watchForEnding(assignment.transferId, fetch);
    try {
      const source = assignment.from === 'origin' ? 'origin' : assignment.from;
      const { outcome, bytesPerSecond } = await this.fetchPiece(fetch, source, signal);
      if (controller.signal.aborted || this.host !== host) return;
      this.report({
        transferId: assignment.transferId,
        outcome,
        ...(bytesPerSecond === undefined ? {} : { bytesPerSecond }),
      });
    } finally {
      clearTimeout(fetch.endingTimer);
      this.endingNotices.delete(assignment.transferId);
      this.fetches.delete(assignment.transferId);
    }
  }

  private newFetch(piece: number, controller: AbortController): Fetch {
    const length = this.options.map.pieceLength(piece);
    return {
      piece,
      controller,
      started: performance.now(),
      length,
      landedBefore: 0,
      progress: { filled: 0 },
    };
  }

  private endingLeadMs(): number {
    const rounds = ENDING_LEAD_ROUND_TRIPS * (this.syncRoundTripMs ?? 0);
    return Math.min(ENDING_LEAD_MAX_MS, Math.max(ENDING_LEAD_MIN_MS, rounds));
  }

  /**
   * The pipelining notice: looks at the transfer shortly after its first byte lands (HTTP sources
   * say when; a request queued behind another on the peer's one connection may wait a while, and a
   * piece arriving at a fast share is over within tens of ms), or one lead after the start for a
   * source that does not say; then again when, at the rate its bytes have arrived since the first,
   * it should be one lead time from its end; announces it as ending once that is now. A few timer
   * wake-ups per transfer.
   */
  private watchForEnding(transferId: number, fetch: Fetch): void {
    const check = (): void => {
      if (this.fetches.get(transferId) !== fetch) return;
      const landed = fetch.landedBefore + fetch.progress.filled;
      const elapsedMs = performance.now() - firstByteOf(fetch);
      const next = endingCheck(landed, fetch.length, elapsedMs, this.endingLeadMs());
      if (next === 'ending') {
        this.endingNotices.add(transferId);
        this.flushReports();
        return;
      }
      lookAt(next);
    };
    const lookAt = (delayMs: number): void => {
      clearTimeout(fetch.endingTimer);
      fetch.endingTimer = setTimeout(check, delayMs);
      fetch.endingTimer.unref();
    };
    fetch.progress.onFirstByte = () => lookAt(ENDING_SAMPLE_MIN_MS);
    lookAt(this.endingLeadMs());
  }

  /** Fetches, verifies and stores one piece; never throws (the outcome says what happened). */
  private async fetchPiece(
    fetch: Fetch,
    /** 'origin', or the base URL of a peer. */
    source: string,
    signal: AbortSignal,
  ): Promise<{ outcome: Report['outcome']; bytesPerSecond?: number }> {
    const buffer = this.takeBuffer();
    const result = await this.fetchInto(fetch, source, signal, buffer.subarray(0, fetch.length));
    // A read that failed or was cancelled may still have bytes in flight towards its buffer: only
    // buffers whose read completed go back to the pool.
    if (result.outcome === 'verified' || result.outcome === 'corrupt') this.buffers.push(buffer);
    return result;
  }

  private takeBuffer(): Buffer {
    return this.buffers.pop() ?? Buffer.allocUnsafeSlow(this.options.map.pieceSize);
  }

  private async fetchInto(
    fetch: Fetch,
    source: string,
    signal: AbortSignal,
    bytes: Buffer,
  ): Promise<{ outcome: Report['outcome']; bytesPerSecond?: number }> {
    const { piece, started } = fetch;
    const length = bytes.length;
    try {
      const client = source === 'origin' ? this.options.origin : this.peerClient(source);
      await this.readChunked(client, fetch, bytes, signal);
    } catch (error) {
      if (signal.aborted) return { outcome: 'cancelled' };
      // An origin that lacks the file or stayed down past its retry budget: stop, do not loop.
      if (source === 'origin' && isFinalOriginError(error)) this.fail(error as WeightcastError);
      this.stats.failedTransfers++;
      this.options.onEvent?.({
        type: 'piece',
        piece,
        from: source === 'origin' ? 'origin' : 'peer',
        outcome: 'failed',
        bytes: 0,
        ms: performance.now() - started,
      });
      return { outcome: 'failed' };
    }
    const seconds = Math.max(1e-6, (performance.now() - started) / 1000);
    const movingSeconds = Math.max(1e-6, (performance.now() - firstByteOf(fetch)) / 1000);
    let result;
    try {
      result = await this.options.store.put(piece, bytes);
    } catch (error) {
      if (signal.aborted) return { outcome: 'cancelled' };
      // The local disk failed, not the sender: stop the model rather than fetch what cannot be kept.
      if (isWeightcastError(error) && error.code === 'IO') this.fail(error);
      return { outcome: 'failed' };
    }
    const from = source === 'origin' ? 'origin' : 'peer';
    const trace = {
      verifyMs: performance.now() - started - seconds * 1000,
      waitMs: firstByteOf(fetch) - started,
      ...(from === 'peer' ? { parent: source } : {}),
    };
    if (result === 'corrupt') {
      this.stats.corruptPieces++;
      this.options.onEvent?.({
        type: 'piece',
        piece,
        from,
        outcome: 'corrupt',
        bytes: length,
        ms: seconds * 1000,
        ...trace,
      });
      return { outcome: 'corrupt' };
    }
    if (result === 'duplicate') this.stats.duplicateBytes += length;
    else if (from === 'origin') this.stats.originBytes += length;
    else this.stats.peerBytes += length;
    this.options.onEvent?.({
      type: 'piece',
      piece,
      from,
      outcome: 'verified',
      bytes: length,
      ms: seconds * 1000,
      ...trace,
    });
    this.urgentPieces.delete(piece);
    if (this.options.store.complete && !this.completed) {
      this.completed = true;
      this.completeResolve();
      this.options.onEvent?.({ type: 'complete' });
    }
    return { outcome: 'verified', bytesPerSecond: length / movingSeconds };
  }

  /**
   * Reads a piece from the origin or a peer (a peer serves the model's files by byte range, only
   * ranges it holds verified, so the same zero-copy ranged reads apply). Under a download cap the
   * read goes in chunks, so the cap holds while the piece arrives. Each chunk's tokens are awaited
   * while the chunk is in flight, not after it: paying afterwards would add the receiver's wait to
   * the sender's pace (two caps in series), where a link allows the smaller of the two. Measured on
   * the 8-agent loopback demo: that halved the swarm's throughput.
   */
  private async readChunked(
    source: Pick<Origin, 'readInto'>,
    fetch: Fetch,
    buffer: Buffer,
    signal: AbortSignal,
  ): Promise<void> {
    const where = this.options.map.locate(fetch.piece);
    const throttle = this.options.downloadThrottle;
    const chunk = throttle.limited ? READ_CHUNK_CAPPED_BYTES : buffer.length;
    for (let done = 0; done < buffer.length; done += chunk) {
      const part = buffer.subarray(done, Math.min(buffer.length, done + chunk));
      // The first chunk reads into the fetch's own progress object (watchForEnding listens to it).
      if (done > 0) {
        const chunkFirstByteMs = fetch.progress.firstByteMs;
        if (chunkFirstByteMs !== undefined) fetch.firstByteMs ??= chunkFirstByteMs;
        fetch.progress = { filled: 0 };
      }
      fetch.landedBefore = done;
      await Promise.all([
        source.readInto(where.file.path, where.offset + done, part, { signal, progress: fetch.progress }),
        throttle.take(part.length, signal),
      ]);
    }
  }

  private peerClient(peerUrl: string): PeerReader {
    let client = this.peers.get(peerUrl);
    if (client === undefined) {
      client = new PeerReader({
        url: peerUrl,
        model: this.options.model,
        map: this.options.map,
        fileIndex: this.fileIndex,
        idleTimeoutMs: this.options.peerIdleTimeoutMs ?? 10_000,
        wire: this.options.peerWire ?? true,
      });
      this.peers.set(peerUrl, client);
    }
    return client;
  }

  // ---- fallback without a scheduler ------------------------------------------------------------

  private async fallbackLoop(): Promise<void> {
    const signal = this.controller.signal;
    while (!signal.aborted && !this.options.store.complete) {
      await sleep(200, undefined, { signal }).catch(() => undefined);
      if (signal.aborted || this.host !== undefined || !this.schedulerDown) continue;
      await this.refreshPeerHave(signal);
      this.fallbackPump(signal);
    }
  }

  private async refreshPeerHave(signal: AbortSignal): Promise<void> {
    const now = performance.now();
    await Promise.all(
      this.knownPeers.map(async (peer) => {
        const known = this.peerHave.get(peer);
        if (known !== undefined && now - known.at < PEER_HAVE_REFRESH_MS) return;
        let pieces: Set<number> | undefined;
        try {
          const raw = await callJson(`${peer}/v1/models/${this.options.model}/have`, 'a peer', {
            timeoutMs: 2000,
            signal,
          });
          const have = parseMessage(haveSchema, raw, 'have');
          pieces = new Set(decodeBitfield(have.have, this.options.map.pieceCount));
        } catch {
          pieces = undefined;
        }
        this.peerHave.set(peer, { at: now, pieces });
      }),
    );
  }

  private fallbackPump(signal: AbortSignal): void {
    const { store, map } = this.options;
    const missing: number[] = [];
    for (let piece = 0; piece < map.pieceCount; piece++) {
      if (!store.has(piece) && !this.fallbackPieces.has(piece)) missing.push(piece);
    }
    const urgentFirst = missing.filter((piece) => this.urgentPieces.has(piece));
    while (this.fallbackRunning < this.downloadsMax && missing.length > 0 && this.host === undefined) {
      const piece = urgentFirst.pop() ?? missing.splice(randomInt(missing.length), 1)[0];
      if (piece === undefined) break;
      if (this.fallbackPieces.has(piece) || store.has(piece)) continue;
      const holders = [...this.peerHave.entries()]
        .filter(([, v]) => v.pieces?.has(piece) === true)
        .map(([k]) => k);
      let source: string;
      if (holders.length > 0) source = holders[randomInt(holders.length)] as string;
      else if (this.fallbackOriginReads < FALLBACK_ORIGIN_READS_MAX) source = 'origin';
      else continue;
      this.fallbackPieces.add(piece);
      this.fallbackRunning++;
      if (source === 'origin') this.fallbackOriginReads++;
      void this.fetchPiece(this.newFetch(piece, new AbortController()), source, signal)
        .then((result) => {
          if (result.outcome === 'verified') this.stats.fallbackPieces++;
          if (result.outcome !== 'verified' && source !== 'origin') this.peerHave.delete(source);
        })
        .finally(() => {
          this.fallbackPieces.delete(piece);
          this.fallbackRunning--;
          if (source === 'origin') this.fallbackOriginReads--;
          if (this.host === undefined && !signal.aborted) this.fallbackPump(signal);
        });
    }
  }
}

/** When the fetch's bytes began to land: its first byte, else (none yet, or a local read) its start. */
function firstByteOf(fetch: Fetch): number {
  return fetch.firstByteMs ?? fetch.progress.firstByteMs ?? fetch.started;
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

function ewma(previous: number | undefined, sample: number): number {
  return previous === undefined ? sample : previous + EWMA_WEIGHT * (sample - previous);
}
