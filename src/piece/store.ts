/**
 * The verified piece store of one model on one host: the model's files, written piece by piece at
 * their offsets, and a journal of the pieces that were verified and written. Nothing enters the store
 * without matching the manifest's SHA-256 (`put` hashes it), and nothing is served from it unless the
 * journal says it was verified, so a peer can never make this host store or serve a wrong byte.
 *
 * Layout: files live under `dataDir` at their model paths (sparse until filled); `stateDir` holds
 * `journal` (one line per verified piece, see journal.ts) and `store.json` (which model, which
 * boot). With `finalDir` (a pull's destination) a file is synced and renamed from `dataDir` into
 * `finalDir` once every piece of it is verified, and the directory synced (final-file.ts, the same
 * steps as the pull's), so a file under its final name is always complete; its open handle keeps
 * serving peers after the rename. Without it only a file that took bytes through the page cache is
 * synced, so that a failing disk's EIO is heard (see finishFile). A failed sync removes the state
 * file, so that no later open trusts the journal for bytes the disk may not hold (syncFile).
 *
 * Hashing by policy: `put` hashes inline, or takes the digest a caller's hash worker computed
 * (`{ digest }`); `copyFrom` has a hash worker read a local file, hash it and write it at its offset
 * only if the digest is the expected one. Either way the digest is compared with the reference here.
 *
 * Learning digests (`learnDigests`, a pull that trusts an origin without a manifest): the manifest's
 * piece digests are unknown, each piece's digest is learnt as it is stored and journalled, and the
 * journal is the reference on resume. Without it nothing unverified is written, counted or renamed.
 *
 * Restart: within one boot the journal is trusted (a kill -9 loses no written bytes); after a reboot
 * journaled pieces are hashed again before they count. State of another `identity` is discarded:
 * its journal and its partial files.
 */

import { mkdir, open, readFile, rm, rmdir, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { pathWithoutSymlinks } from '../util/no-symlinks.js';
import { constants } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { WeightcastError } from '../errors.js';
import { checkFreeSpace, filesHeldIn, freeSpaceAt } from '../util/free-space.js';
import type { HashPool } from '../manifest/hash-pool.js';
import { manifestDigest, type ManifestFile } from '../manifest/manifest.js';
import { JournalWriter, bootId, readJournal } from './journal.js';
import type { PieceMap } from './piece-map.js';
import { digestMatches, pieceDigest, verifyPiece } from './verify.js';
import { moveToFinalName, Writeback, writeFully, writeFullySync } from './final-file.js';
import { INLINE_WRITE_SLOW_MS, writesInline } from './write-policy.js';
import { LoopBusy } from '../util/loop-busy.js';
import { directEligible, isDirectRefusal, O_DIRECT } from './direct-io.js';

export interface PieceStoreOptions {
  dataDir: string;
  stateDir: string;
  /** Move each completed file here (a pull's destination). Without it files stay in `dataDir`. */
  finalDir?: string;
  /**
   * Bytes already on disk when the store opens (journaled pieces after a reboot, files found at their
   * final names) are hashed on this many worker threads, started only when there is such work: the
   * main thread stays free (an agent serves its other models meanwhile) and a large model is checked
   * on every core. 0 hashes them on the main thread. Default: the machine's cores less one, at least
   * one. Pieces arriving later are hashed inline (verifyPiece) unless the caller hands in a digest.
   */
  hashThreads?: number;
  /** Hash threads to use for that instead of starting `hashThreads` of its own (not closed here). */
  hashPool?: HashPool;
  /** What the state belongs to; other state is discarded. Default: the manifest's digest. */
  identity?: string;
  /**
   * A check of the manifest still under way (an agent's join checks the Merkle roots while it
   * fetches): no file is finished (synced, renamed, counted) before it resolves, and the piece that
   * would finish one fails with its error if it rejects.
   */
  manifestCheck?: Promise<void>;
  /** The state file's name in `stateDir`. Default: `store.json`. */
  stateFileName?: string;
  /** The manifest's piece digests are unknown: learn each from the bytes stored (see above). */
  learnDigests?: boolean;
  /**
   * A file at its final name that does not verify is fetched again and replaced by the verified one
   * (a pull into its own destination). Default: refused with PULL_DESTINATION_CONFLICT.
   */
  replaceMismatchedFinals?: boolean;
  /** Called when a completed file was moved under its final name (not for files adopted there). */
  onFileFinished?: (fileIndex: number) => void;
  /**
   * Write and read pieces whose buffers came from `pieceBuffer` with O_DIRECT, past the page cache
   * (direct-io.ts), where the file system allows it. Default false.
   */
  directIo?: boolean;
  /**
   * Refuse to open (IO, naming both sizes) when the file system under `dataDir` lacks room for the
   * blocks the model still needs (checkSpace below): for stores that will hold the whole model (a
   * pull, an agent's join), not for a seed node's share. Default false.
   */
  checkSpace?: boolean;
  /**
   * Write a verified piece with a synchronous system call on this thread while the event loop is
   * mostly idle and the piece small (write-policy.ts), instead of on libuv's thread pool: for stores
   * fed from the network at a link's pace (an agent, `pull --scheduler`). Default false.
   */
  inlineWrites?: boolean;
  /** With `inlineWrites`: the event loop's recent busy share, 0-1 (tests). Default: LoopBusy. */
  loopBusy?: () => number;
  /** With `inlineWrites`: the clock that times inline writes, in ms (tests). Default: performance.now. */
  clock?: () => number;
}

export type PutResult = 'stored' | 'duplicate' | 'corrupt';

interface FileState {
  handle: FileHandle;
  remaining: number;
  final: boolean;
  /** Background flushes while a file bound for a destination fills (final-file.ts). */
  writeback: Writeback;
  /** The same file opened with O_DIRECT (a partial file, with `directIo`). */
  direct?: FileHandle | undefined;
  /** The kernel refused a direct transfer on this file: it goes on buffered. */
  directRefused?: boolean;
  /** Some of this file's bytes were written through the page cache (see finishFile). */
  buffered?: boolean;
}

export class PieceStore {
  private readonly held: Uint8Array;
  private heldPieces = 0;
  private heldByteCount = 0;
  private readonly files: FileState[] = [];
  private readonly waiters = new Map<number, Array<() => void>>();
  /** Puts in progress, so a second copy of the same piece waits instead of counting twice. */
  private readonly writing = new Map<number, Promise<unknown>>();
  /** With `learnDigests`: the digest of each piece held (or, while opening, journalled). */
  private readonly learnt: Array<string | undefined>;
  private closed = false;
  private directWritten = 0;
  private inlineWritten = 0;
  private loopGauge: LoopBusy | undefined;
  /** When an inline write last held the loop too long (INLINE_WRITE_SLOW_MS). */
  private slowInlineAt = -Infinity;

  private constructor(
    readonly map: PieceMap,
    private readonly options: PieceStoreOptions,
    private readonly journal: JournalWriter,
    /** Whether state of another identity was found and discarded when the store opened. */
    readonly stateDiscarded: boolean,
    /** The state file; without it the next open trusts nothing in the journal. */
    private readonly statePath: string,
  ) {
    this.held = new Uint8Array(map.pieceCount);
    this.learnt = options.learnDigests === true ? new Array<string | undefined>(map.pieceCount) : [];
  }

  /**
   * Whether the store in `stateDir` will open empty: it has no state file yet, and without one
   * nothing in a journal counts. A joining agent relies on it to register before the store is open.
   * (Not for stores with a `finalDir`: those may adopt finished files.)
   */
  static async opensEmpty(stateDir: string): Promise<boolean> {
    return (await stat(join(stateDir, STATE_FILE_DEFAULT)).catch(() => undefined)) === undefined;
  }

  /** Whether any of the model's files is already under its final name in `finalDir`. */
  static async hasFinalFiles(map: PieceMap, finalDir: string): Promise<boolean> {
    const found = await Promise.all(
      map.manifest.files.map(
        async (file) => (await stat(join(finalDir, file.path)).catch(() => undefined)) !== undefined,
      ),
    );
    return found.includes(true);
  }

  /** Opens (creating or resuming) the store; returns it with every verified piece already known. */
  static async open(map: PieceMap, options: PieceStoreOptions): Promise<PieceStore> {
    const model = options.identity ?? manifestDigest(map.manifest);
    const statePath = join(options.stateDir, options.stateFileName ?? STATE_FILE_DEFAULT);
    const journalPath = join(options.stateDir, 'journal');
    // Independent round trips at once (a state file that cannot be read yet means a new store).
    const [boot, stateText] = await Promise.all([
      bootId(),
      readFile(statePath, 'utf8').catch(() => undefined),
      mkdir(options.stateDir, { recursive: true }),
      mkdir(options.dataDir, { recursive: true }),
    ]);
    let previous: { model?: string; boot?: string } = {};
    try {
      previous = stateText === undefined ? {} : (JSON.parse(stateText) as typeof previous);
    } catch {
      previous = {};
    }
    // Without a state file nothing in a journal counts; with another model's, nothing in the
    // partial files either.
    if (previous.model !== model) await rm(journalPath, { force: true });
    const discarded = previous.model !== undefined && previous.model !== model;
    if (discarded) {
      await rm(options.dataDir, { recursive: true, force: true });
      await mkdir(options.dataDir, { recursive: true });
    }
    if (options.checkSpace === true) {
      // Refused: the data folder made above goes again if nothing was in it, and in a destination
      // its parent too (`DIR/.weightcast`, as removeEmptyDataDirs does).
      await checkSpace(map, options).catch(async (error: unknown) => {
        await rmdir(options.dataDir).catch(() => undefined);
        if (options.finalDir !== undefined) await rmdir(dirname(options.dataDir)).catch(() => undefined);
        throw error;
      });
    }
    const rehash = previous.boot !== undefined && previous.boot !== boot;
    const records = previous.model === model ? await readJournal(journalPath) : [];
    // The state file, the journal and the data files are independent: one round of I/O, not three
    // (a join waits on this before it registers; under load every round costs milliseconds).
    const [state, journal, files] = await Promise.allSettled([
      writeFile(statePath, JSON.stringify({ model, boot }) + '\n'),
      JournalWriter.open(journalPath),
      openFiles(map, options),
    ]);
    if (state.status === 'rejected' || journal.status === 'rejected' || files.status === 'rejected') {
      await Promise.allSettled([
        ...(journal.status === 'fulfilled' ? [journal.value.close()] : []),
        ...(files.status === 'fulfilled' ? files.value.map(closeFileHandles) : []),
      ]);
      const failed = [state, journal, files].find((result) => result.status === 'rejected');
      throw failed?.status === 'rejected' ? failed.reason : new Error('the store did not open');
    }
    const store = new PieceStore(map, options, journal.value, discarded, statePath);
    store.files.push(...files.value);
    try {
      await store.restore(records, rehash);
      await store.finishCompleteFiles();
    } catch (error) {
      await store.close();
      throw error;
    }
    return store;
  }

  get heldCount(): number {
    return this.heldPieces;
  }

  /** Bytes of the verified pieces held. */
  get heldBytes(): number {
    return this.heldByteCount;
  }

  /** Bytes written past the page cache (O_DIRECT, with `directIo`). */
  get directBytes(): number {
    return this.directWritten;
  }

  /** Bytes written on this thread rather than the thread pool (`inlineWrites`). */
  get inlineBytes(): number {
    return this.inlineWritten;
  }

  get complete(): boolean {
    return this.heldPieces === this.map.pieceCount;
  }

  has(piece: number): boolean {
    return this.held[piece] === 1;
  }

  /** The digest piece `piece` must have (learnt ones once held); undefined while still unknown. */
  digestOf(piece: number): string | undefined {
    return this.options.learnDigests === true ? this.learnt[piece] : this.map.locate(piece).digest;
  }

  /**
   * Verifies `bytes` against the manifest and stores them; corrupt bytes are never written. `digest`:
   * their SHA-256 as the caller's hash worker computed it, compared here instead of hashing again.
   */
  async put(piece: number, bytes: Uint8Array, options: { digest?: string } = {}): Promise<PutResult> {
    const where = this.map.locate(piece);
    const learn = this.options.learnDigests === true;
    const digest = learn ? (options.digest ?? pieceDigest(bytes)) : where.digest;
    const valid = learn
      ? bytes.length === where.length
      : options.digest === undefined
        ? verifyPiece(bytes, where)
        : digestMatches(bytes.length, options.digest, where);
    if (!valid) return 'corrupt';
    const now = this.options.clock ?? monotonicMs;
    const inline =
      this.options.inlineWrites === true &&
      writesInline(this.busyShare(), bytes.length, now() - this.slowInlineAt);
    return this.store(piece, async (file) => {
      const started = inline ? now() : 0;
      const direct = await transferAt(file, bytes, where.offset, inline ? writeFullySync : writeFully);
      if (direct) this.directWritten += bytes.length;
      else file.buffered = true;
      if (inline) {
        this.inlineWritten += bytes.length;
        const ended = now();
        if (ended - started > INLINE_WRITE_SLOW_MS) this.slowInlineAt = ended;
      }
      return digest;
    });
  }

  /** The event loop's recent busy share (inlineWrites). */
  private busyShare(): number {
    if (this.options.loopBusy !== undefined) return this.options.loopBusy();
    this.loopGauge ??= new LoopBusy();
    return this.loopGauge.busyShare();
  }

  /**
   * Stores piece `piece` from the same range of the local file `source` without the bytes crossing
   * this thread: a hash worker reads and hashes them, and writes them into the data file only if the
   * digest is the expected one (learnt digests: always). Returns the digest read, for the caller's
   * account of a rejected piece.
   */
  async copyFrom(
    piece: number,
    source: string,
    pool: HashPool,
    signal?: AbortSignal,
  ): Promise<{ result: PutResult; digest: string }> {
    const where = this.map.locate(piece);
    const learn = this.options.learnDigests === true;
    let digest = '';
    const result = await this.store(piece, async (file) => {
      const expected = learn ? undefined : where.digest;
      const copied = await pool.copyPiece(
        source,
        this.pathOf(where.fileIndex),
        where.offset,
        where.length,
        expected,
        signal,
        file.direct !== undefined && file.directRefused !== true,
      );
      digest = copied.digest;
      this.directWritten += copied.directBytes;
      if (copied.directRefused) file.directRefused = true;
      // What did not go direct went through the page cache.
      if (copied.written && copied.directBytes < where.length) file.buffered = true;
      return copied.written && (learn || digestMatches(where.length, copied.digest, where))
        ? copied.digest
        : undefined;
    });
    return { result, digest: digest === '' ? (this.digestOf(piece) ?? '') : digest };
  }

  /**
   * Runs `write` for a piece not held yet (it writes verified bytes and returns their digest, or
   * undefined when it wrote nothing because they were wrong), then journals and counts the piece.
   */
  private async store(
    piece: number,
    write: (file: FileState) => Promise<string | undefined>,
  ): Promise<PutResult> {
    if (this.has(piece)) return 'duplicate';
    const running = this.writing.get(piece);
    if (running !== undefined) {
      await running.catch(() => undefined);
      return this.has(piece) ? 'duplicate' : this.store(piece, write);
    }
    this.assertOpen();
    const where = this.map.locate(piece);
    const file = this.files[where.fileIndex] as FileState;
    const job = (async (): Promise<PutResult> => {
      const digest = await write(file);
      if (digest === undefined) return 'corrupt';
      await this.recordVerified(piece, digest);
      return 'stored';
    })().catch((error: unknown) => {
      throw this.writeError(piece, error);
    });
    this.writing.set(piece, job);
    try {
      return await job;
    } finally {
      this.writing.delete(piece);
    }
  }

  /** A verified piece is on disk at its offset: flushes, journals and counts it. */
  private async recordVerified(piece: number, digest: string): Promise<void> {
    const where = this.map.locate(piece);
    const file = this.files[where.fileIndex] as FileState;
    if (this.options.finalDir !== undefined && !file.final)
      file.writeback.wrote(where.length, file.remaining <= 1);
    await this.journal.append({ file: where.fileIndex, piece: where.piece, digest });
    if (this.options.learnDigests === true) this.learnt[piece] = digest;
    // The file is finished (synced, renamed into place) before its last piece counts, so a
    // complete store means every file is under its final name.
    file.remaining--;
    if (file.remaining === 0) {
      await this.options.manifestCheck;
      await this.finishFile(where.fileIndex);
    }
    this.mark(piece);
    if (this.complete) await this.removeEmptyDataDirs();
  }

  /**
   * Once every file is under its final name, the partial files' folders are empty: remove them and
   * their parent (`DIR/.weightcast/agent` and `DIR/.weightcast`: a destination should hold the model,
   * not our scaffolding). Folders that are not empty (a pull's journal) stay; so does
   * `DIR/.weightcast` while the lock of the pull the agent writes for is in it, and the lock's
   * release removes it (pull/destination.ts).
   */
  private async removeEmptyDataDirs(): Promise<void> {
    if (this.options.finalDir === undefined) return;
    const nested = new Set<string>();
    for (const file of this.map.manifest.files) {
      for (let dir = dirname(file.path); dir !== '.' && dir !== '/'; dir = dirname(dir)) nested.add(dir);
    }
    const deepestFirst = [...nested].sort((a, b) => b.split('/').length - a.split('/').length);
    for (const dir of deepestFirst) await rmdir(join(this.options.dataDir, dir)).catch(() => undefined);
    await rmdir(this.options.dataDir).catch(() => undefined);
    await rmdir(dirname(this.options.dataDir)).catch(() => undefined);
  }

  /** A failed write as a typed IO error naming the file and the system's code (ENOSPC, EIO, ...). */
  private writeError(piece: number, error: unknown): unknown {
    if (error instanceof WeightcastError) return error;
    const where = this.map.locate(piece);
    const code = (error as NodeJS.ErrnoException | undefined)?.code;
    return new WeightcastError(
      'IO',
      `cannot store piece ${where.piece} of ${where.file.path}: ${(error as Error)?.message ?? String(error)}`,
      { file: where.file.path, piece, ...(code === undefined ? {} : { errno: code }) },
      { cause: error },
    );
  }

  /** Reads a verified piece into `target` (at least the piece's length); returns the length. */
  async read(piece: number, target: Uint8Array): Promise<number> {
    if (!this.has(piece)) {
      throw new WeightcastError('SWARM_PIECE_NOT_HELD', `piece ${piece} is not held here`, { piece });
    }
    this.assertOpen();
    const where = this.map.locate(piece);
    const file = this.files[where.fileIndex] as FileState;
    await transferAt(file, target.subarray(0, where.length), where.offset, readFully);
    return where.length;
  }

  /** Reads bytes of a file; the caller has made sure every piece under the range is held. */
  async readFileRange(fileIndex: number, offset: number, target: Uint8Array): Promise<void> {
    this.assertOpen();
    const file = this.files[fileIndex];
    if (file === undefined) throw new RangeError(`no file ${fileIndex}`);
    await transferAt(file, target, offset, readFully);
  }

  /** Resolves once `piece` is held (immediately if it is). */
  whenHeld(piece: number, signal?: AbortSignal): Promise<void> {
    if (this.has(piece)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const list = this.waiters.get(piece) ?? [];
      const onAbort = (): void => {
        const current = this.waiters.get(piece);
        const index = current?.indexOf(wake) ?? -1;
        if (current !== undefined && index >= 0) current.splice(index, 1);
        reject(signal?.reason instanceof Error ? signal.reason : new WeightcastError('ABORTED', 'aborted'));
      };
      const wake = (): void => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      if (signal?.aborted === true) {
        onAbort();
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      list.push(wake);
      this.waiters.set(piece, list);
    });
  }

  /** The directory the model's files are in once complete. */
  get filesDirectory(): string {
    return this.options.finalDir ?? this.options.dataDir;
  }

  /** Where file `fileIndex` lives now (its final name once complete, with `finalDir`). */
  pathOf(fileIndex: number): string {
    const file = this.map.manifest.files[fileIndex];
    if (file === undefined) throw new RangeError(`no file ${fileIndex}`);
    const state = this.files[fileIndex];
    const base =
      state?.final === true && this.options.finalDir !== undefined
        ? this.options.finalDir
        : this.options.dataDir;
    return join(base, file.path);
  }

  /**
   * The path of a file of the store that was deleted under it (someone removed the model's folder),
   * or undefined while every file is still there: an open file that no name links to any more
   * (nlink 0) keeps its disk space and takes writes no one will see.
   */
  async removedFile(): Promise<string | undefined> {
    if (this.closed) return undefined;
    const links = await Promise.all(
      this.files.map((file) =>
        file.handle.stat().then(
          (stats) => stats.nlink,
          () => 1,
        ),
      ),
    );
    const index = links.findIndex((count) => count === 0);
    return index < 0 ? undefined : this.pathOf(index);
  }

  async sync(): Promise<void> {
    await Promise.all(this.files.map((file) => file.handle.datasync()));
    await this.journal.sync();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.journal.close().catch(() => undefined);
    await Promise.allSettled(this.files.map((file) => file.writeback.settled()));
    await Promise.all(this.files.map(closeFileHandles));
  }

  private assertOpen(): void {
    if (this.closed) throw new WeightcastError('ABORTED', 'the piece store is closed');
  }

  private mark(piece: number): void {
    if (this.held[piece] === 1) return;
    this.held[piece] = 1;
    this.heldPieces++;
    this.heldByteCount += this.map.pieceLength(piece);
    const waiting = this.waiters.get(piece);
    if (waiting === undefined) return;
    this.waiters.delete(piece);
    for (const wake of waiting) wake();
  }

  private async restore(
    records: ReadonlyArray<{ file: number; piece: number; digest: string }>,
    rehash: boolean,
  ): Promise<void> {
    const learn = this.options.learnDigests === true;
    const journaled: number[] = [];
    const seen = new Set<number>();
    for (const record of records) {
      const file = this.map.manifest.files[record.file];
      const state = this.files[record.file];
      if (file === undefined || state === undefined || record.piece >= file.pieces.length) continue;
      // Learning, the journal is the reference; otherwise a record must name the manifest's digest.
      if (!learn && file.pieces[record.piece] !== record.digest) continue;
      const global = this.map.globalIndex(record.file, record.piece);
      if (seen.has(global) || this.has(global)) continue;
      seen.add(global);
      if (learn) this.learnt[global] = record.digest;
      // A file at its final name speaks for itself (checked below against these references).
      if (!state.final) journaled.push(global);
    }
    const finals = this.files.flatMap((state, index) => (state.final ? [index] : []));
    const bulk = (rehash && journaled.length > 0) || finals.length > 0;
    const pool = bulk ? await this.bulkHashPool() : undefined;
    try {
      const good = rehash ? await this.verifyAllOnDisk(journaled, pool) : journaled.map(() => true);
      journaled.forEach((piece, i) => {
        if (good[i] !== true || this.has(piece)) return;
        this.mark(piece);
        (this.files[this.map.locate(piece).fileIndex] as FileState).remaining--;
      });
      // Files found at their final names count only if every byte matches.
      for (const index of finals) await this.adoptFinal(index, pool);
    } finally {
      if (pool !== this.options.hashPool) await pool?.close();
    }
    // Learnt digests of pieces that did not count are no reference for anything.
    if (!learn) return;
    for (let piece = 0; piece < this.map.pieceCount; piece++) {
      if (!this.has(piece)) this.learnt[piece] = undefined;
    }
  }

  /** Counts a file found at its final name if it verifies; else refuses it, or replaces it by request. */
  private async adoptFinal(index: number, pool: HashPool | undefined): Promise<void> {
    const state = this.files[index] as FileState;
    const file = this.map.manifest.files[index] as ManifestFile;
    if (!(await this.verifyFileOnDisk(index, pool))) {
      if (this.options.replaceMismatchedFinals !== true) {
        throw new WeightcastError(
          'PULL_DESTINATION_CONFLICT',
          `${this.pathOf(index)} exists and does not match the manifest; move it away first`,
          { file: this.pathOf(index) },
        );
      }
      // Left where it is until the verified copy is renamed over it.
      await state.handle.close();
      this.files[index] = await openDataFile(file, this.options);
      return;
    }
    for (let p = 0; p < file.pieces.length; p++) this.mark(this.map.globalIndex(index, p));
    state.remaining = 0;
  }

  /** Each piece's check: all queued at once on the workers, one at a time on this thread. */
  private async verifyAllOnDisk(pieces: readonly number[], pool: HashPool | undefined): Promise<boolean[]> {
    if (pool !== undefined) return Promise.all(pieces.map((piece) => this.verifyOnDisk(piece, pool)));
    const good: boolean[] = [];
    for (const piece of pieces) good.push(await this.verifyOnDisk(piece, undefined));
    return good;
  }

  /** Worker threads for hashing what is already on disk; undefined: hash on this thread. */
  private async bulkHashPool(): Promise<HashPool | undefined> {
    if (this.options.hashPool !== undefined) return this.options.hashPool;
    const threads = this.options.hashThreads ?? Math.max(1, availableParallelism() - 1);
    if (threads <= 0) return undefined;
    const { HashPool } = await import('../manifest/hash-pool.js');
    return new HashPool(threads);
  }

  /** Whether a whole file at its final name is the manifest's (or the journal's), piece by piece. */
  private async verifyFileOnDisk(index: number, pool: HashPool | undefined): Promise<boolean> {
    const file = this.map.manifest.files[index];
    const state = this.files[index] as FileState;
    if (file === undefined || (await state.handle.stat()).size !== file.size) return false;
    const references = file.pieces.map((_, p) => this.digestOf(this.map.globalIndex(index, p)));
    if (references.includes(undefined)) return false;
    if (pool === undefined) {
      for (let p = 0; p < file.pieces.length; p++) {
        if (!(await this.verifyOnDisk(this.map.globalIndex(index, p), undefined))) return false;
      }
      return true;
    }
    if (file.size === 0) return true;
    const { digests } = await pool
      .hashFileRange(this.pathOf(index), 0, file.size, this.map.pieceSize)
      .catch(() => ({ digests: [] as string[] }));
    return digests.length === references.length && digests.every((digest, p) => digest === references[p]);
  }

  private async verifyOnDisk(piece: number, pool: HashPool | undefined): Promise<boolean> {
    const where = this.map.locate(piece);
    const reference = this.digestOf(piece);
    if (reference === undefined) return false;
    if (pool !== undefined) {
      const path = this.pathOf(where.fileIndex);
      const digest = await pool
        .hashFileRange(path, where.offset, where.length, this.map.pieceSize)
        .then((result) => result.digests[0])
        .catch(() => undefined);
      return digest === reference;
    }
    const state = this.files[where.fileIndex] as FileState;
    const buffer = Buffer.allocUnsafe(where.length);
    try {
      await readFully(state.handle, buffer, where.offset);
    } catch {
      return false;
    }
    return verifyPiece(buffer, { length: where.length, digest: reference });
  }

  private async finishCompleteFiles(): Promise<void> {
    for (let index = 0; index < this.files.length; index++) {
      const state = this.files[index] as FileState;
      if (state.remaining === 0 && !state.final) await this.finishFile(index);
    }
  }

  private async finishFile(fileIndex: number): Promise<void> {
    const state = this.files[fileIndex] as FileState;
    if (state.final) return;
    if (this.options.finalDir === undefined) {
      // An agent's cache is not synced for durability: after a reboot journaled pieces are hashed
      // again, and syncing every file held the model's last piece back by the writeback of the
      // whole file (~0.6 s for 8 agents x 256 MiB on one disk, before O_DIRECT). But a failing disk
      // (EIO) fails a buffered write only at writeback, and tells that to a sync alone: without
      // one the model completed, and was served, from pages the disk never took. So a file that
      // took bytes through the page cache is synced before it counts; bytes written with O_DIRECT
      // met any error at their write. With direct I/O on, only a file's unaligned last piece is
      // buffered: in the 8-agent demo (256 MiB, 8 files) such a sync took 23 ms at the median.
      if (state.buffered === true) await this.syncFile(state);
      return;
    }
    const file = this.map.manifest.files[fileIndex];
    if (file === undefined) return;
    await this.syncFile(state);
    await moveToFinalName(undefined, join(this.options.dataDir, file.path), this.options.finalDir, file.path);
    state.final = true;
    this.options.onFileFinished?.(fileIndex);
  }

  /**
   * Syncs a finished file's bytes (after its background flushes). When that fails, the journal
   * counts pieces the disk may not hold, and Linux reports a writeback error to one sync only: a
   * later open in this boot would trust the journal, sync cleanly and count (or rename into place)
   * a file the disk never took. So the state file goes first; without it nothing journaled counts.
   */
  private async syncFile(state: FileState): Promise<void> {
    try {
      await state.writeback.settled();
      await state.handle.datasync();
    } catch (error) {
      await rm(this.statePath, { force: true }).catch(() => undefined);
      throw error;
    }
  }
}

/** The store's state (model digest and boot id) in its state directory. */
const STATE_FILE_DEFAULT = 'store.json';

/**
 * IO before any data file is made when the file system under `dataDir` lacks room for what the model
 * still needs: each file's size in whole blocks, less the blocks it holds already (a partial file's
 * pieces, or the file at its final name). Without it a pull or a join ran until the disk was full,
 * an hour into a large model. A check made once: another writer may still fill the disk later, and a
 * write's ENOSPC then stops the model as before (writeError).
 */
async function checkSpace(map: PieceMap, options: PieceStoreOptions): Promise<void> {
  const finalDir = options.finalDir;
  const files = await filesHeldIn(
    map.manifest.files,
    finalDir === undefined ? [options.dataDir] : [options.dataDir, finalDir],
  );
  checkFreeSpace({
    dir: finalDir ?? options.dataDir,
    files,
    ...(await freeSpaceAt(options.dataDir)),
    beyond: ' beyond the pieces already there',
  });
}

/** The clock that times inline writes (PieceStoreOptions.clock). */
function monotonicMs(): number {
  return performance.now();
}

/** Read-write, created when missing, never truncated on open. */
const OPEN_READ_WRITE_CREATE = constants.O_RDWR | constants.O_CREAT;

/**
 * Opens (creating, sparse, at their full size) every data file of the model, all at once: one after
 * another, a model's files cost several file-system round trips each, which held a joining agent's
 * first request back by tens of ms on a busy host. If one fails, the others are closed.
 */
async function openFiles(map: PieceMap, options: PieceStoreOptions): Promise<FileState[]> {
  const opened = await Promise.allSettled(map.manifest.files.map((file) => openFile(file, options)));
  const failed = opened.find((result) => result.status === 'rejected');
  if (failed !== undefined) {
    await Promise.all(
      opened.flatMap((result) => (result.status === 'fulfilled' ? [closeFileHandles(result.value)] : [])),
    );
    throw failed.reason;
  }
  return opened.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
}

/** Closes a file's handles, the direct one too; errors are dropped (the store is being given up). */
async function closeFileHandles(file: FileState): Promise<void> {
  await Promise.all([
    file.handle.close().catch(() => undefined),
    file.direct?.close().catch(() => undefined),
  ]);
}

async function openFile(file: ManifestFile, options: PieceStoreOptions): Promise<FileState> {
  if (options.finalDir === undefined) return openDataFile(file, options);
  // A destination's paths are the user's: no link below it is followed (src/util/no-symlinks.ts);
  // its partial files are in it too.
  const [dataPath, finalPath] = await Promise.all([
    pathWithoutSymlinks(options.dataDir, file.path),
    pathWithoutSymlinks(options.finalDir, file.path),
  ]);
  const [dataInfo, finalInfo] = await Promise.all([
    stat(dataPath).catch(() => undefined),
    stat(finalPath).catch(() => undefined),
  ]);
  if (finalInfo?.isDirectory() === true) {
    throw new WeightcastError(
      'PULL_DESTINATION_CONFLICT',
      `${finalPath} is a directory, but the model has a file there`,
      { file: file.path },
    );
  }
  // A completed file already sits at its final name; it is adopted (restore) if it verifies.
  if (dataInfo !== undefined || finalInfo?.isFile() !== true) return openDataFile(file, options, dataPath);
  const handle = await open(finalPath, 'r');
  return { handle, remaining: file.pieces.length, final: true, writeback: new Writeback(() => handle) };
}

/** Opens (creating, at its full size, never truncating what is there) a file's partial copy. */
async function openDataFile(
  file: ManifestFile,
  options: PieceStoreOptions,
  checkedPath?: string,
): Promise<FileState> {
  const path =
    checkedPath ??
    (options.finalDir === undefined
      ? join(options.dataDir, file.path)
      : await pathWithoutSymlinks(options.dataDir, file.path));
  // The data directory exists already (PieceStore.open makes it); only nested paths need theirs.
  if (file.path.includes('/')) await mkdir(dirname(path), { recursive: true });
  // Read-write, created if missing, never truncated: one call where a stat used to pick the flags.
  const handle = await open(path, OPEN_READ_WRITE_CREATE);
  try {
    const size = (await handle.stat()).size;
    if (size !== file.size) await handle.truncate(file.size);
  } catch (error) {
    await handle.close();
    throw error;
  }
  // A file system without O_DIRECT refuses the open (EINVAL): the file is then written buffered.
  const direct =
    options.directIo === true && O_DIRECT !== undefined && file.size > 0
      ? await open(path, constants.O_RDWR | O_DIRECT).catch(() => undefined)
      : undefined;
  return {
    handle,
    remaining: file.pieces.length,
    final: false,
    writeback: new Writeback(() => handle),
    direct,
  };
}

/**
 * Moves `view` to or from `position` of the file with `move` (writeFully or readFully): past the
 * page cache when the file has a direct handle and the buffer and range are aligned for it, else
 * buffered. A direct transfer the kernel refuses is done again buffered, and the file goes on
 * buffered. Returns whether the bytes went direct.
 */
async function transferAt(
  file: FileState,
  view: Uint8Array,
  position: number,
  move: (handle: FileHandle, view: Uint8Array, position: number) => Promise<void>,
): Promise<boolean> {
  const direct = file.direct;
  if (direct !== undefined && file.directRefused !== true && directEligible(view, position)) {
    try {
      await move(direct, view, position);
      return true;
    } catch (error) {
      if (!isDirectRefusal(error)) throw error;
      file.directRefused = true;
    }
  }
  await move(file.handle, view, position);
  return false;
}

async function readFully(handle: FileHandle, target: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < target.length) {
    const { bytesRead } = await handle.read(target, done, target.length - done, position + done);
    if (bytesRead <= 0) throw new WeightcastError('IO', `short read at ${position + done}`);
    done += bytesRead;
  }
}
