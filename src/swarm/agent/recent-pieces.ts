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
 * Bounded by bytes; the oldest runs go first. Pure data structure: no I/O, no timers.
 */

interface Entry {
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

export interface RecentPiecesOptions {
  /** Bytes of buffers kept at most (a run in a larger buffer is not kept). */
  budgetBytes: number;
  /** The model's piece size: a run's pieces lie back to back, all but a file's last this long. */
  pieceSize: number;
  /** Where a buffer goes once nothing refers to it any more (the fetcher's pool). */
  recycle: (buffer: Buffer) => void;
}

export class RecentPieces {
  /** Runs by first piece, oldest first (a Map keeps insertion order). */
  private readonly runs = new Map<number, Entry>();
  /** Piece to the run that holds it. */
  private readonly byPiece = new Map<number, Entry>();
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
    if (buffer.length > this.options.budgetBytes || pieces < 1 || length > buffer.length) {
      this.options.recycle(buffer);
      return;
    }
    for (let piece = first; piece < first + pieces; piece++) {
      const older = this.byPiece.get(piece);
      if (older !== undefined) this.drop(older);
    }
    const entry: Entry = { first, pieces, buffer, length, pins: 0, evicted: false, tainted: false };
    this.runs.set(first, entry);
    for (let piece = first; piece < first + pieces; piece++) this.byPiece.set(piece, entry);
    this.bytesKept += buffer.length;
    for (const oldest of this.runs.values()) {
      if (this.bytesKept <= this.options.budgetBytes) break;
      this.drop(oldest);
    }
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

  private drop(entry: Entry): void {
    if (entry.evicted) return;
    entry.evicted = true;
    this.runs.delete(entry.first);
    for (let piece = entry.first; piece < entry.first + entry.pieces; piece++) {
      if (this.byPiece.get(piece) === entry) this.byPiece.delete(piece);
    }
    this.bytesKept -= entry.buffer.length;
    if (entry.pins === 0 && !entry.tainted) this.options.recycle(entry.buffer);
  }
}
