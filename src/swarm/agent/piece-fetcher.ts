/**
 * PieceFetcher: the member's piece I/O. It fetches a run of consecutive pieces of one file (one
 * piece, or the missing pieces of a transfer unit) from the origin or a peer into a reused buffer,
 * as one range, under the host's download cap, and hands each piece's bytes to the store, which
 * verifies them against the manifest before writing. It keeps the member's byte counts and emits
 * one `piece` event per piece. Assigned fetches (member.ts) and fallback fetches
 * (fallback-fetcher.ts) both go through it; neither knows how bytes move.
 */

import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError, isWeightcastError } from '../../errors.js';
import { isFinalOriginError, type Origin, type ReadProgress } from '../../origin/origin.js';
import type { PieceMap } from '../../piece/piece-map.js';
import type { Throttle } from '../../util/throttle.js';
import type { Report } from '../wire/protocol.js';
import type { MemberStore } from './member-store.js';
import { pieceBuffer } from '../../piece/direct-io.js';
import { PIECE_RETRIES_DEFAULT } from '../../piece/verify.js';
import { PeerReader } from './peer-reader.js';
import { RecentBudget, RecentPieces, recentBytesFor } from './recent-pieces.js';

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

export type PieceEvent = {
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
  /**
   * When the piece came in a run of several (a transfer unit): the run's first piece, its pieces and
   * its bytes; `ms` and `waitMs` are the run's.
   */
  run?: { first: number; pieces: number; bytes: number };
  /** For a corrupt piece: its file and its index in that file, as errors and `verify` name it. */
  file?: { path: string; piece: number };
  /** Pushed by the ring parent (ring mode), not fetched. */
  ring?: boolean;
};

/** A run of pieces on its way: what the fetcher and the member's pipelining notice share. */
export interface Fetch {
  /** The run's first piece. */
  piece: number;
  /** Consecutive pieces of the same file, from `piece` on. */
  pieces: number;
  controller: AbortController;
  started: number;
  /** The run's bytes. */
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
}

export interface PieceFetcherOptions {
  model: string;
  map: PieceMap;
  store: MemberStore;
  origin: Origin;
  downloadThrottle: Throttle;
  peerIdleTimeoutMs: number;
  peerWire: boolean;
  /** The cluster credential (and TLS) sent to peers. */
  access?: ServiceAccess | undefined;
  onEvent?: (event: PieceEvent) => void;
  /**
   * The store could not write (a full disk, an I/O error), or the origin cannot give a piece (the
   * file is not there, access is refused, an outage outlasted the retry budget): the model has to
   * stop on this host.
   */
  onStoreFailure: (error: WeightcastError) => void;
  /**
   * The memory for recently verified runs kept for uploads and local reads, shared with the agent's
   * other models. Default: a budget of its own (recent-pieces.ts).
   */
  recentBudget?: RecentBudget;
}

export interface FetchResult {
  outcome: Report['outcome'];
  bytesPerSecond?: number;
  /** A failed fetch the peer turned away because its upload slots were full (SWARM_BUSY). */
  busy?: boolean;
}

/** Failed origin reads of one piece (each retried by the origin itself) after which the model stops. */
export const ORIGIN_FAILURES_PER_PIECE_MAX = PIECE_RETRIES_DEFAULT + 1;

/** Chunk of a capped read: small enough to keep the cap smooth, large enough to be cheap. */
const READ_CHUNK_CAPPED_BYTES = 512 * 1024;

export class PieceFetcher {
  readonly stats: MemberStats = {
    duplicateBytes: 0,
    originBytes: 0,
    peerBytes: 0,
    corruptPieces: 0,
    failedTransfers: 0,
    fallbackPieces: 0,
  };
  /** Failed origin reads per piece (see originFailed). */
  private readonly originFailures = new Map<number, number>();
  /** Piece buffers, reused: fresh multi-MiB allocations cost page faults and GC on every piece. */
  private readonly buffers: Buffer[] = [];
  /** Buffers a socket may still read from (pin), and those to pool once it no longer does. */
  private readonly pinned = new Map<Buffer, number>();
  private readonly recycleWhenUnpinned = new Set<Buffer>();
  /** One reader per peer (a persistent connection), reading pieces straight into the buffers. */
  private readonly peers = new Map<string, PeerReader>();
  /** File path to manifest index, for the peer readers. */
  private readonly fileIndex: ReadonlyMap<string, number>;
  /** The runs verified last, in their buffers, for uploads to peers and local reads. */
  readonly recent: RecentPieces;

  constructor(private readonly options: PieceFetcherOptions) {
    this.fileIndex = new Map(options.map.manifest.files.map((file, index) => [file.path, index]));
    const budget = options.recentBudget ?? new RecentBudget();
    budget.raise(recentBytesFor(options.map.pieceSize));
    this.recent = new RecentPieces({
      budget,
      pieceSize: options.map.pieceSize,
      recycle: (buffer) => this.recycle(buffer),
    });
  }

  /** A fetch of `pieces` consecutive pieces from `piece` on (the caller keeps them in one file). */
  newFetch(piece: number, controller: AbortController, pieces = 1): Fetch {
    let length = 0;
    for (let p = piece; p < piece + pieces; p++) length += this.options.map.pieceLength(p);
    return {
      piece,
      pieces,
      controller,
      started: performance.now(),
      length,
      landedBefore: 0,
      progress: { filled: 0 },
    };
  }

  /** Fetches, verifies and stores one piece; never throws (the outcome says what happened). */
  async fetch(
    fetch: Fetch,
    /** 'origin', or the base URL of a peer. */
    source: string,
    signal: AbortSignal,
  ): Promise<FetchResult> {
    const buffer = this.takeBuffer(fetch.length);
    const result = await this.fetchInto(fetch, source, signal, buffer.subarray(0, fetch.length));
    // A read that failed or was cancelled may still have bytes in flight towards its buffer: only
    // buffers whose read completed go back to the pool. A verified run's buffer serves uploads first.
    if (result.outcome === 'verified') this.recent.keep(fetch.piece, fetch.pieces, buffer, fetch.length);
    else if (result.outcome === 'corrupt') this.recycle(buffer);
    return result;
  }

  /**
   * Ring mode: `buffer` is being written to a socket from (a push cut through while its piece
   * arrives): it goes back to the pool only once every pin is released.
   */
  pin(buffer: Buffer): () => void {
    this.pinned.set(buffer, (this.pinned.get(buffer) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.pinned.get(buffer) ?? 1) - 1;
      if (left > 0) {
        this.pinned.set(buffer, left);
        return;
      }
      this.pinned.delete(buffer);
      if (this.recycleWhenUnpinned.delete(buffer)) this.buffers.push(buffer);
    };
  }

  /** A buffer nothing needs any more goes back to the pool, or waits for its pins. */
  private recycle(buffer: Buffer): void {
    if (this.pinned.has(buffer)) this.recycleWhenUnpinned.add(buffer);
    else this.buffers.push(buffer);
  }

  /** Ring mode: a pooled buffer for a piece pushed by the ring parent (ring-feed.ts). */
  bufferFor(length: number): Buffer {
    return this.takeBuffer(length);
  }

  /**
   * Ring mode: a piece the ring parent pushed into `buffer` (from bufferFor), verified and stored as
   * a fetched one is: kept among the recent runs (this host pushes it on from there), counted, one
   * `piece` event. Corrupt bytes reject with PIECE_HASH_MISMATCH (the feed ends: the parent is at
   * fault); a store that cannot write stops the model, as for a fetch.
   */
  async storePushed(piece: number, buffer: Buffer, parent: string): Promise<void> {
    const started = performance.now();
    const length = this.options.map.pieceLength(piece);
    let result;
    try {
      result = await this.options.store.put(piece, buffer.subarray(0, length));
    } catch (error) {
      this.recycle(buffer);
      if (isWeightcastError(error) && error.code === 'IO') this.options.onStoreFailure(error);
      throw error;
    }
    const event: PieceEvent = {
      type: 'piece',
      piece,
      from: 'peer',
      outcome: result === 'corrupt' ? 'corrupt' : 'verified',
      bytes: length,
      ms: 0,
      verifyMs: performance.now() - started,
      parent,
      ring: true,
    };
    if (result === 'corrupt') {
      this.recycle(buffer);
      this.stats.corruptPieces++;
      const where = this.options.map.locate(piece);
      event.file = { path: where.file.path, piece: where.piece };
      this.options.onEvent?.(event);
      throw new WeightcastError(
        'PIECE_HASH_MISMATCH',
        `${where.file.path} piece ${where.piece} pushed by the ring parent ${parent} does not match the manifest's SHA-256`,
        { file: where.file.path, piece: where.piece, index: piece },
      );
    }
    if (result === 'duplicate') {
      this.recycle(buffer);
      this.stats.duplicateBytes += length;
    } else {
      this.recent.keep(piece, 1, buffer, length);
      this.stats.peerBytes += length;
    }
    this.options.onEvent?.(event);
  }

  /** A pooled buffer of at least `length` bytes (a whole number of pieces, so units reuse it). */
  private takeBuffer(length: number): Buffer {
    const index = this.buffers.findIndex((buffer) => buffer.length >= length);
    if (index >= 0) return this.buffers.splice(index, 1)[0] as Buffer;
    const { pieceSize } = this.options.map;
    return pieceBuffer(Math.max(1, Math.ceil(length / pieceSize)) * pieceSize);
  }

  async close(): Promise<void> {
    this.recent.clear();
    await Promise.allSettled([...this.peers.values()].map((client) => client.close()));
    this.peers.clear();
  }

  private async fetchInto(
    fetch: Fetch,
    source: string,
    signal: AbortSignal,
    bytes: Buffer,
  ): Promise<FetchResult> {
    const { piece, started } = fetch;
    const length = bytes.length;
    const from = source === 'origin' ? 'origin' : 'peer';
    try {
      const client = source === 'origin' ? this.options.origin : this.peerClient(source);
      await this.readChunked(client, fetch, bytes, signal);
    } catch (error) {
      if (signal.aborted) return { outcome: 'cancelled' };
      if (from === 'origin') this.originFailed(piece, error);
      this.stats.failedTransfers++;
      this.options.onEvent?.({
        type: 'piece',
        piece,
        from,
        outcome: 'failed',
        bytes: 0,
        ms: performance.now() - started,
      });
      return isWeightcastError(error, 'SWARM_BUSY')
        ? { outcome: 'failed', busy: true }
        : { outcome: 'failed' };
    }
    const seconds = Math.max(1e-6, (performance.now() - started) / 1000);
    const movingSeconds = Math.max(1e-6, (performance.now() - firstByteOf(fetch)) / 1000);
    // Each piece of the run is verified and stored on its own: one bad piece does not cost the
    // others, and the run is reported corrupt (the sender's fault) if any piece was.
    let corrupt = false;
    let at = 0;
    for (let p = piece; p < piece + fetch.pieces; p++) {
      const pieceBytes = bytes.subarray(at, at + this.options.map.pieceLength(p));
      at += pieceBytes.length;
      let result;
      try {
        result = await this.options.store.put(p, pieceBytes);
      } catch (error) {
        if (signal.aborted) return { outcome: 'cancelled' };
        // The local disk failed, not the sender: stop the model rather than fetch what cannot be kept.
        if (isWeightcastError(error) && error.code === 'IO') this.options.onStoreFailure(error);
        return { outcome: 'failed' };
      }
      const event: PieceEvent = {
        type: 'piece',
        piece: p,
        from,
        outcome: result === 'corrupt' ? 'corrupt' : 'verified',
        bytes: pieceBytes.length,
        ms: seconds * 1000,
        verifyMs: performance.now() - started - seconds * 1000,
        waitMs: firstByteOf(fetch) - started,
        ...(from === 'peer' ? { parent: source } : {}),
        ...(fetch.pieces > 1 ? { run: { first: piece, pieces: fetch.pieces, bytes: length } } : {}),
      };
      if (result === 'corrupt') {
        const where = this.options.map.locate(p);
        event.file = { path: where.file.path, piece: where.piece };
        corrupt = true;
        this.stats.corruptPieces++;
      } else if (result === 'duplicate') this.stats.duplicateBytes += pieceBytes.length;
      else if (from === 'origin') this.stats.originBytes += pieceBytes.length;
      else this.stats.peerBytes += pieceBytes.length;
      this.options.onEvent?.(event);
    }
    if (corrupt) return { outcome: 'corrupt' };
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
  /**
   * An origin read failed. One that reading again cannot fix (a missing or short file, a refusal,
   * an outage past the retry budget) stops the model at once; any other stops it once the origin
   * has failed the same piece ORIGIN_FAILURES_PER_PIECE_MAX times, so that no fault has the
   * scheduler assign the same read forever (the origin retried each of those reads itself).
   */
  private originFailed(piece: number, error: unknown): void {
    const failures = (this.originFailures.get(piece) ?? 0) + 1;
    this.originFailures.set(piece, failures);
    if (isFinalOriginError(error)) {
      this.options.onStoreFailure(error as WeightcastError);
    } else if (failures >= ORIGIN_FAILURES_PER_PIECE_MAX) {
      const where = this.options.map.locate(piece);
      this.options.onStoreFailure(
        new WeightcastError(
          'ORIGIN_RETRIES_EXHAUSTED',
          `${where.file.path} piece ${where.piece}: the origin failed it ${failures} times; last: ${(error as Error).message}`,
          { file: where.file.path, piece: where.piece, attempts: failures },
          { cause: error },
        ),
      );
    }
  }

  private async readChunked(
    source: Pick<Origin, 'readInto'>,
    fetch: Fetch,
    buffer: Buffer,
    signal: AbortSignal,
  ): Promise<void> {
    const where = this.options.map.locate(fetch.piece);
    const throttle = this.options.downloadThrottle;
    if (!throttle.limited) {
      fetch.landedBefore = 0;
      await source.readInto(where.file.path, where.offset, buffer, { signal, progress: fetch.progress });
      return;
    }
    for (let done = 0; done < buffer.length; done += READ_CHUNK_CAPPED_BYTES) {
      const part = buffer.subarray(done, Math.min(buffer.length, done + READ_CHUNK_CAPPED_BYTES));
      // The first chunk reads into the fetch's own progress object (the ending notice watches it).
      if (done > 0) {
        const chunkFirstByteMs = fetch.progress.firstByteMs;
        if (chunkFirstByteMs !== undefined) fetch.firstByteMs ??= chunkFirstByteMs;
        // The ending notice's watcher carries over, looking at the new chunk's first bytes.
        const { onWatch } = fetch.progress;
        fetch.progress = { filled: 0, ...(onWatch === undefined ? {} : { watchAt: 0, onWatch }) };
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
        idleTimeoutMs: this.options.peerIdleTimeoutMs,
        wire: this.options.peerWire,
        ...(this.options.access === undefined ? {} : { access: this.options.access }),
      });
      this.peers.set(peerUrl, client);
    }
    return client;
  }
}

/** When the fetch's bytes began to land: its first byte, else (none yet, or a local read) its start. */
export function firstByteOf(fetch: Fetch): number {
  return fetch.firstByteMs ?? fetch.progress.firstByteMs ?? fetch.started;
}
