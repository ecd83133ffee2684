/**
 * ReadStream: the engine of the streaming materialiser. It reads planned groups (plan.ts) from an
 * origin into one memory arena and hands each request's bytes to the consumer, in the order they
 * become complete and verified, as an async iterator.
 *
 * How data moves:
 *   1. Allocate. Groups get arena space in file order within a file; across files the file with the
 *      fewest bytes allocated goes next, so a window of reads is balanced by bytes over up to
 *      `filesActiveMax` files. When the next group does not fit, allocation stops until the consumer
 *      frees space (no smaller group may overtake it, so a large tensor is never starved).
 *   2. Read. Up to `concurrency` ranged reads are in flight, taken from the file with the fewest bytes
 *      issued. Each lands directly in its place in the arena: no copy.
 *   3. Verify. When every read of a piece is in, a worker hashes the piece in place (hash-pool.ts);
 *      a wrong digest re-reads the piece up to `pieceRetries` times, then fails the stream with
 *      PIECE_HASH_MISMATCH. Without digests nothing is hashed.
 *   4. Deliver. A group whose pieces are verified (and whose head bytes, if any, were copied from the
 *      previous group) queues its requests; `next()` hands them out as views of the arena.
 *   5. Release. When the consumer asks for the item after a group's last one (and has let go of every
 *      `hold` it took on the group's items), the group's space goes back to the arena. If the next group of that file still needs its head bytes, they are first
 *      copied into a small carry buffer (less than one piece; room for one per active file is kept
 *      out of the arena), so a released group never pins arena space.
 *
 * With `partBytes`, requests larger than that are cut into parts before planning (each delivered
 * with its offset in the request), so no group, and no arena, needs the size of the largest tensor.
 * The arena is at most the window (`windowBytes`), so its pages are faulted in once and reused.
 *
 * Back-pressure falls out of this: unconsumed groups hold arena space, allocation stops, reads stop.
 * Memory never exceeds `memoryBytes`: the arena plus the carry reserve is the budget.
 *
 * Failure: the first error (a read, a digest, the caller's abort) aborts every read in flight through
 * an internal AbortController, waits for all of them and for the hash jobs to settle, stops the hash
 * workers, and only then rejects `next()`. Breaking out of the loop does the same through `return()`.
 */

import { availableParallelism } from 'node:os';
import { WeightcastError, abortError, assert } from '../../errors.js';
import type { Origin } from '../../origin/origin.js';
import { ArenaAllocator } from './arena.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT } from './defaults.js';
import { ArenaHashPool } from './hash-pool.js';
import { planReads, type PlannedGroup, type PlannedItem, type PlannedRead, type ReadPlan } from './plan.js';
import type { ByteRange, Delivered, ModelFile, ReadRequest, StreamStats } from './types.js';

const MiB = 1024 * 1024;
export { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT };
export const FILES_ACTIVE_MAX_DEFAULT = 4;
export const READ_BYTES_DEFAULT = 8 * MiB;
export const PIECE_RETRIES_DEFAULT = 2;
export const WINDOW_BYTES_DEFAULT = 64 * MiB;

export interface ReadStreamOptions<T> {
  /** The whole budget: arena plus carry reserve. */
  memoryBytes?: number;
  /** Piece size of the digests in `ModelFile.pieces`. */
  pieceSize?: number;
  /** Ranged reads in flight at once. */
  concurrency?: number;
  /** Files read at the same time (their windows are balanced by bytes). */
  filesActiveMax?: number;
  /** Small requests are packed into groups of at most this size (default: budget / 16, 64 KiB..16 MiB). */
  groupBytes?: number;
  /** Largest single ranged read. */
  readBytes?: number;
  /**
   * Without digests, read only the requested ranges and not the gaps between requests of a group
   * (default false: one read covers the group, fewer and larger reads).
   */
  exactReads?: boolean;
  /** Hash worker threads (default: one per core, so verification uses every core while reads run). */
  hashThreads?: number;
  pieceRetries?: number;
  /**
   * Deliver requests larger than this in parts of at most this many bytes (see `Delivered.part`), so no
   * buffer needs a large tensor's size. Only for consumers that accept parts; default: whole requests.
   */
  partBytes?: number;
  /**
   * The arena's size when the budget is larger: at least twice the largest group, so one group can be
   * read while the consumer holds another. Fresh pages cost a fault each while reused ones are free,
   * so a window that is reused often loads faster than one the size of a large budget.
   */
  windowBytes?: number;
  signal?: AbortSignal;
  /** Names a request in error messages (a tensor name, say). */
  describe?: (tag: T) => string;
}

interface FileState<T> {
  index: number;
  groups: Array<GroupState<T>>;
  /** Next group of this file to get arena space. */
  allocNext: number;
  bytesAllocated: number;
  bytesIssued: number;
  /** Allocated groups with reads not yet issued, in file order. */
  readable: Array<GroupState<T>>;
}

interface GroupState<T> {
  plan: PlannedGroup<T>;
  file: FileState<T>;
  indexInFile: number;
  size: number;
  offset: number | undefined;
  /** Reads not yet issued: the plan's from `readsNext` on, plus pieces queued again after a bad digest. */
  readsNext: number;
  retryReads: PlannedRead[];
  readsOutstanding: number;
  pieceReadsLeft: number[];
  pieceAttempts: number[];
  /** Pieces not yet verified, or reads not yet done when nothing is verified. */
  unitsLeft: number;
  headCopied: boolean;
  complete: boolean;
  itemsUndelivered: number;
  released: boolean;
  /** Consumer holds (`Delivered.hold`) not yet let go; the group is released only at zero. */
  holds: number;
  /** This group's tail, kept for the next group's head after this group was released. */
  carry: Buffer | undefined;
}

interface ReadyItem<T> {
  group: GroupState<T> | undefined;
  item: PlannedItem<T> | undefined;
  request: ReadRequest<T>;
}

/** A part of a request that was split (`partBytes`): the caller's request and where the part lies. */
interface PartOf<T> {
  request: ReadRequest<T>;
  offset: number;
  last: boolean;
}

export class ReadStream<T> implements AsyncIterableIterator<Delivered<T>> {
  readonly stats: StreamStats;
  readonly plan: ReadPlan<T>;
  private readonly origin: Origin;
  private readonly memoryBytes: number;
  private readonly concurrency: number;
  private readonly filesActiveMax: number;
  private readonly pieceRetries: number;
  private readonly hashThreads: number;
  private readonly verifying: boolean;
  private readonly files: Array<FileState<T>>;
  private readonly arena: ArenaAllocator;
  private sab: SharedArrayBuffer | undefined;
  private pool: ArenaHashPool | undefined;
  private readonly controller = new AbortController();
  private readonly callerSignal: AbortSignal | undefined;
  private readonly onCallerAbort = (): void => this.fail(abortError(this.callerSignal, 'reading the model'));
  private readonly inflight = new Set<Promise<void>>();
  private readonly ready: Array<ReadyItem<T>> = [];
  /** The parts the stream reads in place of split requests, keyed by the part's own request. */
  private readonly parts = new Map<ReadRequest<T>, PartOf<T>>();
  private readsInFlight = 0;
  private itemsLeft: number;
  private carryBytes = 0;
  private last: ReadyItem<T> | undefined;
  private failure: unknown;
  private started = false;
  private shutDown: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    origin: Origin,
    files: readonly ModelFile[],
    requests: readonly ReadRequest<T>[],
    options: ReadStreamOptions<T> = {},
  ) {
    this.origin = origin;
    this.memoryBytes = options.memoryBytes ?? MEMORY_BYTES_DEFAULT;
    this.concurrency = positive(options.concurrency ?? CONCURRENCY_DEFAULT, 'concurrency');
    this.pieceRetries = options.pieceRetries ?? PIECE_RETRIES_DEFAULT;
    this.hashThreads = options.hashThreads ?? availableParallelism();
    this.callerSignal = options.signal;
    this.verifying = files.some((file) => file.pieces !== undefined);
    const pieceSize = options.pieceSize ?? 0;
    const roughArena = this.memoryBytes - (this.verifying ? pieceSize : 0);
    const groupBytes = options.groupBytes ?? clamp(Math.floor(roughArena / 16), 64 * 1024, 16 * MiB);
    const readBytes = positive(options.readBytes ?? READ_BYTES_DEFAULT, 'readBytes');
    const partBytes = options.partBytes === undefined ? undefined : positive(options.partBytes, 'partBytes');
    const planned = partBytes === undefined ? requests : this.splitRequests(requests, partBytes);
    this.plan = planReads(files, planned, {
      ...(options.pieceSize === undefined ? {} : { pieceSize: options.pieceSize }),
      groupBytes,
      readBytes,
      gapBytesMax: Math.max(pieceSize, readBytes),
      ...(options.exactReads === true ? { exactReads: true } : {}),
    });
    this.files = this.plan.files.map((groups, index) => this.fileState(groups, index));
    const largest = this.largestGroup();
    this.filesActiveMax = this.chooseActiveFiles(options, largest, pieceSize);
    const carryReserve = this.verifying ? this.filesActiveMax * pieceSize : 0;
    const largestBytes = largest === undefined ? 0 : largest.bufEnd - largest.bufStart;
    const window = Math.max(
      positive(options.windowBytes ?? WINDOW_BYTES_DEFAULT, 'windowBytes'),
      2 * largestBytes,
    );
    this.arena = new ArenaAllocator(Math.min(this.memoryBytes - carryReserve, this.plan.bufferBytes, window));
    this.itemsLeft = planned.length;
    this.stats = {
      bytesRead: 0,
      bytesDelivered: 0,
      piecesVerified: 0,
      piecesRejected: 0,
      bytesCopied: 0,
      residentBytes: 0,
      residentBytesPeak: 0,
      arenaBytes: this.arena.capacity,
    };
    for (const request of this.plan.empty) this.ready.push({ group: undefined, item: undefined, request });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  async next(): Promise<IteratorResult<Delivered<T>>> {
    this.start();
    this.releaseLast();
    for (;;) {
      if (this.failure !== undefined) {
        await this.shutdown();
        throw asError(this.failure);
      }
      const entry = this.ready.shift();
      if (entry !== undefined) {
        this.last = entry;
        this.itemsLeft--;
        return { value: this.deliver(entry), done: false };
      }
      if (this.itemsLeft === 0) {
        await this.shutdown();
        return { value: undefined, done: true };
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Called when the consumer leaves the loop early: cancels everything still running. */
  async return(): Promise<IteratorResult<Delivered<T>>> {
    if (this.itemsLeft > 0 && this.failure === undefined) {
      this.failure = new WeightcastError('ABORTED', 'the consumer stopped reading the model');
      this.controller.abort(this.failure);
    }
    await this.shutdown();
    return { value: undefined, done: true };
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    if (this.callerSignal?.aborted === true) {
      this.fail(abortError(this.callerSignal, 'reading the model'));
      return;
    }
    this.callerSignal?.addEventListener('abort', this.onCallerAbort, { once: true });
    if (this.arena.capacity > 0) {
      this.sab = new SharedArrayBuffer(this.arena.capacity);
      if (this.verifying) this.pool = new ArenaHashPool(this.sab, this.hashThreads);
    }
    this.pump();
  }

  private fileState(groups: Array<PlannedGroup<T>>, index: number): FileState<T> {
    const file: FileState<T> = {
      index,
      groups: [],
      allocNext: 0,
      bytesAllocated: 0,
      bytesIssued: 0,
      readable: [],
    };
    file.groups = groups.map((plan, indexInFile) => ({
      plan,
      file,
      indexInFile,
      size: plan.bufEnd - plan.bufStart,
      offset: undefined,
      readsNext: 0,
      retryReads: [],
      readsOutstanding: 0,
      pieceReadsLeft: plan.pieces.map((piece) => piece.reads),
      pieceAttempts: plan.pieces.map(() => 0),
      unitsLeft: plan.pieces.length > 0 ? plan.pieces.length : plan.reads.length,
      headCopied: plan.headBytes === 0,
      complete: false,
      itemsUndelivered: plan.items.length,
      released: false,
      holds: 0,
      carry: undefined,
    }));
    return file;
  }

  private largestGroup(): PlannedGroup<T> | undefined {
    let largest: PlannedGroup<T> | undefined;
    for (const groups of this.plan.files) {
      for (const group of groups) {
        if (largest === undefined || group.bufEnd - group.bufStart > largest.bufEnd - largest.bufStart)
          largest = group;
      }
    }
    return largest;
  }

  /** As many files at once as the budget allows next to the largest group and the carries. */
  private chooseActiveFiles(
    options: ReadStreamOptions<T>,
    largest: PlannedGroup<T> | undefined,
    pieceSize: number,
  ): number {
    const wanted = positive(options.filesActiveMax ?? FILES_ACTIVE_MAX_DEFAULT, 'filesActiveMax');
    const largestBytes = largest === undefined ? 0 : largest.bufEnd - largest.bufStart;
    const carry = this.verifying ? pieceSize : 0;
    const affordable = carry === 0 ? wanted : Math.floor((this.memoryBytes - largestBytes) / carry);
    if (largest !== undefined && (affordable < 1 || largestBytes > this.memoryBytes - carry)) {
      const item = largest.items.reduce((a, b) => (b.bytes > a.bytes ? b : a));
      const name = options.describe?.(item.request.tag) ?? `bytes ${largest.bufStart}..${largest.bufEnd}`;
      // A part's buffer is not its tensor's size: name both, or the figure reads as a wrong size.
      const whole = this.parts.get(item.request)?.request;
      const what =
        whole === undefined
          ? name
          : `a part of ${name} (${requestBytes(whole)} bytes, read in parts of at most ${options.partBytes})`;
      throw new WeightcastError(
        'LOADER_TENSOR_TOO_LARGE',
        `${largest.file}: ${what} needs ${largestBytes} bytes of buffer` +
          (carry > 0 ? ` plus ${carry} for a piece carried between buffers` : '') +
          `, over the memory budget of ${this.memoryBytes} bytes; raise the budget`,
        { file: largest.file, bytesNeeded: largestBytes + carry, memoryBytes: this.memoryBytes },
      );
    }
    return Math.max(1, Math.min(wanted, affordable));
  }

  // ---- scheduling -------------------------------------------------------------------------------

  private pump(): void {
    if (this.failure !== undefined || this.shutDown !== undefined) return;
    this.allocate();
    this.issueReads();
  }

  private activeFiles(): Array<FileState<T>> {
    const active: Array<FileState<T>> = [];
    for (const file of this.files) {
      if (file.allocNext >= file.groups.length) continue;
      active.push(file);
      if (active.length === this.filesActiveMax) break;
    }
    return active;
  }

  private allocate(): void {
    for (;;) {
      const file = leastBy(this.activeFiles(), (f) => f.bytesAllocated);
      if (file === undefined) return;
      const group = file.groups[file.allocNext] as GroupState<T>;
      const offset = this.arena.allocate(group.size);
      // Head-of-line: nothing overtakes a group that does not fit yet.
      if (offset === undefined) return;
      group.offset = offset;
      file.allocNext++;
      file.bytesAllocated += group.size;
      this.noteResident();
      if (group.retryReads.length > 0 || group.readsNext < group.plan.reads.length) file.readable.push(group);
      if (!group.headCopied) {
        const previous = file.groups[group.indexInFile - 1];
        if (previous?.complete === true) this.copyHead(group);
      }
      this.checkComplete(group);
    }
  }

  private issueReads(): void {
    while (this.readsInFlight < this.concurrency) {
      const file = leastBy(
        this.files.filter((f) => f.readable.length > 0),
        (f) => f.bytesIssued,
      );
      if (file === undefined) return;
      const group = file.readable[0] as GroupState<T>;
      const read = group.retryReads.shift() ?? group.plan.reads[group.readsNext++];
      assert(read !== undefined, 'a readable group has a read to issue');
      if (group.retryReads.length === 0 && group.readsNext >= group.plan.reads.length) file.readable.shift();
      file.bytesIssued += read.length;
      this.issueRead(group, read);
    }
  }

  private issueRead(group: GroupState<T>, read: PlannedRead): void {
    this.readsInFlight++;
    group.readsOutstanding++;
    const target = this.arenaView(group, read.start - group.plan.bufStart, read.length);
    const done = this.origin
      .readInto(group.plan.file, read.start, target, { signal: this.controller.signal })
      .then(
        () => this.onReadDone(group, read),
        (error: unknown) => this.fail(error),
      )
      .finally(() => {
        this.readsInFlight--;
        group.readsOutstanding--;
        this.inflight.delete(done);
        this.pump();
      });
    this.inflight.add(done);
  }

  private onReadDone(group: GroupState<T>, read: PlannedRead): void {
    if (this.failure !== undefined) return;
    this.stats.bytesRead += read.length;
    if (read.piece < 0) {
      group.unitsLeft--;
      this.checkComplete(group);
      return;
    }
    const left = (group.pieceReadsLeft[read.piece] as number) - 1;
    group.pieceReadsLeft[read.piece] = left;
    if (left === 0) this.hashPiece(group, read.piece);
  }

  private hashPiece(group: GroupState<T>, pieceIndex: number): void {
    const piece = group.plan.pieces[pieceIndex];
    assert(piece !== undefined && this.pool !== undefined && group.offset !== undefined, 'piece to hash');
    const offset = group.offset + (piece.start - group.plan.bufStart);
    const done = this.pool
      .hash(offset, piece.end - piece.start)
      .then(
        (digest) => this.onPieceHashed(group, pieceIndex, digest),
        (error: unknown) => this.fail(error),
      )
      .finally(() => {
        this.inflight.delete(done);
        this.pump();
      });
    this.inflight.add(done);
  }

  private onPieceHashed(group: GroupState<T>, pieceIndex: number, digest: string): void {
    if (this.failure !== undefined) return;
    const piece = group.plan.pieces[pieceIndex] as PlannedGroup<T>['pieces'][number];
    if (digest === piece.digest) {
      this.stats.piecesVerified++;
      group.unitsLeft--;
      this.checkComplete(group);
      return;
    }
    this.stats.piecesRejected++;
    const attempts = (group.pieceAttempts[pieceIndex] as number) + 1;
    group.pieceAttempts[pieceIndex] = attempts;
    if (attempts > this.pieceRetries) {
      this.fail(
        new WeightcastError(
          'PIECE_HASH_MISMATCH',
          `${group.plan.file} piece ${piece.index}: SHA-256 ${digest.slice(0, 16)}… does not match the manifest's ` +
            `${piece.digest.slice(0, 16)}… after ${attempts} reads; no tensor with these bytes was delivered`,
          { file: group.plan.file, piece: piece.index },
        ),
      );
      return;
    }
    const reads = group.plan.reads.filter((read) => read.piece === pieceIndex);
    group.pieceReadsLeft[pieceIndex] = reads.length;
    group.retryReads.push(...reads);
    if (!group.file.readable.includes(group)) {
      group.file.readable.push(group);
      group.file.readable.sort((a, b) => a.indexInFile - b.indexInFile);
    }
  }

  /** Copies a group's head bytes out of the previous group of its file (its buffer or its carry). */
  private copyHead(group: GroupState<T>): void {
    const previous = group.file.groups[group.indexInFile - 1];
    assert(previous?.complete === true && group.offset !== undefined, 'head copied from a verified group');
    const length = group.plan.headBytes;
    const target = this.arenaView(group, 0, length);
    if (previous.carry !== undefined) {
      target.set(previous.carry);
      this.carryBytes -= previous.carry.length;
      previous.carry = undefined;
    } else {
      assert(!previous.released, 'a released group left its tail in a carry');
      target.set(this.arenaView(previous, group.plan.bufStart - previous.plan.bufStart, length));
    }
    this.stats.bytesCopied += length;
    group.headCopied = true;
  }

  private checkComplete(group: GroupState<T>): void {
    if (group.complete || group.offset === undefined || group.unitsLeft > 0 || !group.headCopied) return;
    group.complete = true;
    for (const item of group.plan.items) this.ready.push({ group, item, request: item.request });
    const next = group.file.groups[group.indexInFile + 1];
    if (next !== undefined && !next.headCopied && next.offset !== undefined) {
      this.copyHead(next);
      this.checkComplete(next);
    }
    this.wake?.();
  }

  // ---- delivery and release ---------------------------------------------------------------------

  private bytesOf(entry: ReadyItem<T>): Buffer {
    const { group, item } = entry;
    if (group === undefined || item === undefined) return Buffer.alloc(0);
    const [first] = item.fragments;
    if (item.fragments.length === 1 && first !== undefined) {
      return Buffer.from(
        this.sab as SharedArrayBuffer,
        (group.offset as number) + first.offset,
        first.length,
      );
    }
    // Several ranges (a slice across rows): gathered into one buffer outside the arena.
    const out = Buffer.allocUnsafe(item.bytes);
    let at = 0;
    for (const fragment of item.fragments) {
      out.set(this.arenaView(group, fragment.offset, fragment.length), at);
      at += fragment.length;
    }
    this.stats.bytesCopied += item.bytes;
    return out;
  }

  private deliver(entry: ReadyItem<T>): Delivered<T> {
    const bytes = this.bytesOf(entry);
    this.stats.bytesDelivered += bytes.length;
    const part = this.parts.get(entry.request);
    const delivered: Delivered<T> = { request: part?.request ?? entry.request, bytes };
    if (part !== undefined) delivered.part = { offset: part.offset, last: part.last };
    const { group } = entry;
    if (group !== undefined) delivered.hold = () => this.hold(group);
    return delivered;
  }

  private hold(group: GroupState<T>): () => void {
    assert(!group.released, 'a delivered group is held before the next turn');
    group.holds++;
    let letGo = false;
    return () => {
      if (letGo) return;
      letGo = true;
      group.holds--;
      this.releaseIfDone(group);
    };
  }

  private releaseLast(): void {
    const entry = this.last;
    this.last = undefined;
    const group = entry?.group;
    if (group === undefined) return;
    group.itemsUndelivered--;
    this.releaseIfDone(group);
  }

  private releaseIfDone(group: GroupState<T>): void {
    if (group.itemsUndelivered > 0 || group.holds > 0 || group.released) return;
    const next = group.file.groups[group.indexInFile + 1];
    if (next !== undefined && !next.headCopied) {
      assert(next.offset === undefined, 'an allocated head is copied when its source completes');
      const tail = this.arenaView(group, next.plan.bufStart - group.plan.bufStart, next.plan.headBytes);
      group.carry = Buffer.from(tail);
      this.carryBytes += group.carry.length;
    }
    this.arena.free(group.offset as number, group.size);
    group.released = true;
    this.noteResident();
    this.pump();
  }

  /** Cuts every request larger than `partBytes` into parts, remembering which request each came from. */
  private splitRequests(requests: readonly ReadRequest<T>[], partBytes: number): Array<ReadRequest<T>> {
    const out: Array<ReadRequest<T>> = [];
    for (const request of requests) {
      const total = requestBytes(request);
      if (total <= partBytes) {
        out.push(request);
        continue;
      }
      let offset = 0;
      let ranges: ByteRange[] = [];
      let bytes = 0;
      const emit = (): void => {
        const part: ReadRequest<T> = { file: request.file, ranges, tag: request.tag };
        this.parts.set(part, { request, offset, last: offset + bytes === total });
        out.push(part);
        offset += bytes;
        ranges = [];
        bytes = 0;
      };
      for (const range of request.ranges) {
        let start = range.start;
        while (start < range.end) {
          // Parts also end at file offsets that are multiples of partBytes: with a partBytes that is a
          // multiple of the piece size, a part's group then holds whole pieces and needs no head copy.
          const aligned = (Math.floor(start / partBytes) + 1) * partBytes;
          const end = Math.min(range.end, start + (partBytes - bytes), aligned);
          ranges.push({ start, end });
          bytes += end - start;
          start = end;
          if (bytes === partBytes || end === aligned) emit();
        }
      }
      if (bytes > 0) emit();
    }
    return out;
  }

  private arenaView(group: GroupState<T>, offset: number, length: number): Uint8Array {
    return new Uint8Array(this.sab as SharedArrayBuffer, (group.offset as number) + offset, length);
  }

  private noteResident(): void {
    const resident = this.arena.used + this.carryBytes;
    assert(resident <= this.memoryBytes, `resident ${resident} bytes over the budget ${this.memoryBytes}`);
    this.stats.residentBytes = resident;
    this.stats.residentBytesPeak = Math.max(this.stats.residentBytesPeak, resident);
  }

  // ---- failure and shutdown ---------------------------------------------------------------------

  private fail(error: unknown): void {
    if (this.failure !== undefined) return;
    this.failure = error;
    this.controller.abort(error);
    this.wake?.();
  }

  private shutdown(): Promise<void> {
    this.shutDown ??= (async () => {
      this.callerSignal?.removeEventListener('abort', this.onCallerAbort);
      while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
      await this.pool?.close();
    })();
    return this.shutDown;
  }
}

function positive(value: number, what: string): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new WeightcastError('USAGE', `${what} must be a positive integer, got ${value}`);
  }
  return value;
}

/** Failures are errors already (ours, the origin's, an abort's); anything else is wrapped. */
function asError(failure: unknown): Error {
  return failure instanceof Error ? failure : new WeightcastError('IO', String(failure));
}

function clamp(value: number, low: number, high: number): number {
  return Math.max(low, Math.min(high, value));
}

function leastBy<X>(items: readonly X[], key: (item: X) => number): X | undefined {
  let best: X | undefined;
  let bestKey = Infinity;
  for (const item of items) {
    const value = key(item);
    if (value < bestKey) {
      best = item;
      bestKey = value;
    }
  }
  return best;
}

function requestBytes<T>(request: ReadRequest<T>): number {
  return request.ranges.reduce((sum, range) => sum + (range.end - range.start), 0);
}
