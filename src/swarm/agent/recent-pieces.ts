/**
 * RecentPieces: the buffers of the runs a member verified last, kept in memory so that peers asking
 * for them are served from there: no disk read, no copy. Pieces are written with O_DIRECT (past the
 * page cache), so without this every upload of a piece would be a read from the device, and a host
 * relaying a piece to four children would read it four times. A swarm relays what arrived last: in
 * the netns fan-out 86 % of peer transfers asked for one of the parent's 8 newest pieces, 95 % for
 * one of its 16 newest (see docs/measurements/2026-11-26-recent-pieces.md).
 *
 * Only bytes the store verified enter (the fetcher hands over a run after every piece of it matched
 * the manifest). A buffer lent to an upload is pinned: it is neither evicted into reuse nor
 * recycled until the upload gives it back, and one whose write did not complete (the socket closed
 * with it queued) is never recycled, since the kernel or the stream may still refer to it.
 *
 * Bounded by bytes, agent-wide: every model's RecentPieces draws on one RecentBudget, and the oldest
 * run of any model goes first, so an agent that has fetched many models holds no more than one
 * budget (a model that is complete and seeding gives its memory back as others' runs arrive).
 * Pure data structures: no I/O, no timers.
 */

/** A kept run (exported for RecentBudget's signature; made only by RecentPieces). */
export interface RecentRun {
  readonly owner: RecentPieces;
  readonly first: number;
  readonly pieces: number;
  /** The buffer the run was read into (recycled whole); its first `length` bytes are the run's. */
  readonly buffer: Buffer;
  readonly length: number;
  /** Uploads holding a view of it. */
  pins: number;
  /** Dropped from the index (evicted or cleared) while pinned: recycled by the last unpin. */
  evicted: boolean;
  /** An upload of it did not complete: never recycled. */
  tainted: boolean;
}

/** A view of cached bytes; give it back with `release` once the write that sends it is done. */
export interface Borrowed {
  readonly bytes: Buffer;
  /** `completed`: the stream took the bytes; false when it closed first (the view may be referenced). */
  release(completed: boolean): void;
}

/**
 * How much an agent keeps: RECENT_PIECES of a model's pieces, where the netns fan-out's peers asked
 * for one of a parent's 32 newest transfers 97 % of the time (16 newest: 95 %), within
 * RECENT_BYTES_MIN..RECENT_BYTES_MAX (a model in 16 MiB pieces keeps 16 of them).
 */
export const RECENT_PIECES = 32;
export const RECENT_BYTES_MIN = 16 * 1024 * 1024;
export const RECENT_BYTES_MAX = 256 * 1024 * 1024;

/** The budget a model with pieces of `pieceSize` bytes asks for. */
export function recentBytesFor(pieceSize: number): number {
  return Math.min(RECENT_BYTES_MAX, Math.max(RECENT_BYTES_MIN, RECENT_PIECES * pieceSize));
}

/** The bytes of run buffers an agent keeps, across its models: the oldest run anywhere goes first. */
export class RecentBudget {
  /** Kept runs of every model, oldest first (a Set keeps insertion order). */
  private readonly order = new Set<RecentRun>();
  private usedBytes = 0;
  private limit: number;

  /**
   * `bytesMax`: the budget to start with, grown by `raise` as models join; `fixed`: an operator's
   * figure (`weightcast agent --recent-mb`), which models do not grow (0 keeps nothing).
   */
  constructor(
    bytesMax = RECENT_BYTES_MIN,
    private readonly fixed = false,
  ) {
    this.limit = bytesMax;
  }

  get bytesMax(): number {
    return this.limit;
  }

  /** A model joins: the budget grows to what its pieces ask for (recentBytesFor), never shrinks. */
  raise(bytes: number): void {
    if (!this.fixed) this.limit = Math.max(this.limit, bytes);
  }

  get bytes(): number {
    return this.usedBytes;
  }

  /** Counts a run newly kept, then evicts the oldest runs (any model's) until within the budget. */
  admit(entry: RecentRun): void {
    this.order.add(entry);
    this.usedBytes += entry.buffer.length;
    for (const oldest of this.order) {
      if (this.usedBytes <= this.bytesMax) break;
      oldest.owner.evict(oldest);
    }
  }

  /** Forgets a run its owner dropped. */
  remove(entry: RecentRun): void {
    if (this.order.delete(entry)) this.usedBytes -= entry.buffer.length;
  }
}

export interface RecentPiecesOptions {
  /** The agent's budget, shared with its other models (a run in a larger buffer is not kept). */
  budget: RecentBudget;
  /** The model's piece size: a run's pieces lie back to back, all but a file's last this long. */
  pieceSize: number;
  /** Where a buffer goes once nothing refers to it any more (the fetcher's pool). */
  recycle: (buffer: Buffer) => void;
}

export class RecentPieces {
  /** Runs by first piece. */
  private readonly runs = new Map<number, RecentRun>();
  /** Piece to the run that holds it. */
  private readonly byPiece = new Map<number, RecentRun>();
  private bytesKept = 0;
  /** Views lent so far (uploads and local reads). */
  lent = 0;

  constructor(private readonly options: RecentPiecesOptions) {}

  get bytes(): number {
    return this.bytesKept;
  }

  /**
   * Keeps the verified run [first, first + pieces), whose `length` bytes are the start of `buffer`
   * (owned from now on: recycled once evicted and unpinned). A buffer over the budget is recycled
   * at once.
   */
  keep(first: number, pieces: number, buffer: Buffer, length: number): void {
    if (buffer.length > this.options.budget.bytesMax || pieces < 1 || length > buffer.length) {
      this.options.recycle(buffer);
      return;
    }
    for (let piece = first; piece < first + pieces; piece++) {
      const older = this.byPiece.get(piece);
      if (older !== undefined) this.drop(older);
    }
    const entry: RecentRun = {
      owner: this,
      first,
      pieces,
      buffer,
      length,
      pins: 0,
      evicted: false,
      tainted: false,
    };
    this.runs.set(first, entry);
    for (let piece = first; piece < first + pieces; piece++) this.byPiece.set(piece, entry);
    this.bytesKept += buffer.length;
    this.options.budget.admit(entry);
  }

  /** A view of bytes [offset, offset + length) from `piece`'s start, if one kept run holds them all. */
  borrow(piece: number, offset: number, length: number): Borrowed | undefined {
    const entry = this.byPiece.get(piece);
    if (entry === undefined || length <= 0 || offset < 0) return undefined;
    const from = (piece - entry.first) * this.options.pieceSize + offset;
    if (from + length > entry.length) return undefined;
    entry.pins++;
    this.lent++;
    let released = false;
    return {
      bytes: entry.buffer.subarray(from, from + length),
      release: (completed) => {
        if (released) return;
        released = true;
        entry.pins--;
        if (!completed) entry.tainted = true;
        if (entry.evicted && entry.pins === 0 && !entry.tainted) this.options.recycle(entry.buffer);
      },
    };
  }

  /** Drops every run (the member is closing); pinned ones are recycled when their uploads end. */
  clear(): void {
    for (const entry of [...this.runs.values()]) this.drop(entry);
  }

  /** The budget needs the room: drops one of this model's runs (RecentBudget.admit). */
  evict(entry: RecentRun): void {
    this.drop(entry);
  }

  private drop(entry: RecentRun): void {
    if (entry.evicted) return;
    entry.evicted = true;
    this.options.budget.remove(entry);
    this.runs.delete(entry.first);
    for (let piece = entry.first; piece < entry.first + entry.pieces; piece++) {
      if (this.byPiece.get(piece) === entry) this.byPiece.delete(piece);
    }
    this.bytesKept -= entry.buffer.length;
    if (entry.pins === 0 && !entry.tainted) this.options.recycle(entry.buffer);
  }
}
