/**
 * Single-host verified pull: origin -> piece buffers -> SHA-256 -> the piece store -> final names.
 *
 * How data moves: the work queue holds every piece the store does not hold yet. `lanes` workers each
 * own one piece-sized buffer (so memory is lanes x pieceSize whatever the model size); a lane reads a
 * piece from the origin into its buffer, hands the buffer to a hash thread, and gives bytes and digest
 * to the PieceStore (src/piece/store.ts), which compares the digest with the manifest, writes the
 * piece at its offset in the file's partial copy under `.weightcast/partial/`, journals it and, once a
 * file is complete, syncs it and renames it to its final name. A local origin's pieces are copied by a
 * hash thread straight into the store's partial file. A piece with wrong bytes is fetched again (a few
 * times; from the fallback origin, when the origin is a copy that may have changed) and never
 * written. Resume, re-hashing after a reboot and adopting files already complete at their final
 * names are the store's too; this module keeps the lanes, the retries and the events.
 *
 * Without a manifest the pull trusts the origin: a local origin is hashed first to build one; a remote
 * origin's pieces are hashed as they arrive (the store learns their digests, with the journal as the
 * reference on resume) and the manifest is written at the end.
 *
 * One pull at a time writes into a destination: a second one is refused at once (destination.ts).
 */

import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { WeightcastError, abortError, asIoError, isWeightcastError } from '../errors.js';
import { readSafetensorsHeaderFromFile } from '../format/safetensors.js';
import { buildManifest, checkPieceSize } from '../manifest/build.js';
import { HashPool } from '../manifest/hash-pool.js';
import {
  PIECE_SIZE_DEFAULT,
  encodeManifest,
  manifestDigest,
  parseManifest,
  pieceCount,
  type Manifest,
  type ManifestFile,
} from '../manifest/manifest.js';
import { merkleRoot } from '../manifest/merkle.js';
import type { Origin } from '../origin/origin.js';
import { assertSafeRelativePath } from '../util/safe-path.js';
import { pathWithoutSymlinks } from '../util/no-symlinks.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT } from './defaults.js';
import { PIECE_RETRIES_DEFAULT } from '../piece/verify.js';
import { PieceMap } from '../piece/piece-map.js';
import { PieceStore } from '../piece/store.js';
import { carryAlignment, enableDirectIo, pieceBuffer } from '../piece/direct-io.js';
import { STATE_DIR_NAME, lockDestination } from './destination.js';

export { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT, PIECE_RETRIES_DEFAULT, STATE_DIR_NAME };

/**
 * For a remote origin the main thread drives the network, so the hash threads leave it a core:
 * measured on 2 cores, one hash thread pulls faster (about 720 MiB/s) than two (about 600 MiB/s)
 * because two starve the receiving thread. Local copies run entirely on the hash threads.
 */
export function hashThreadsDefault(origin: Origin): number {
  const cores = availableParallelism();
  return origin.localPath === undefined ? Math.max(1, cores - 1) : cores;
}

export interface PullOptions {
  /** The manifest to verify against. Without it the pull trusts the origin. */
  manifest?: Manifest;
  concurrency?: number;
  /** Budget for piece buffers: lanes = min(concurrency, floor(memoryBytes / pieceSize)). */
  memoryBytes?: number;
  /** Piece size when the pull has to build the manifest itself. */
  pieceSize?: number;
  /** How often a piece whose bytes fail verification is fetched again before the pull fails. */
  pieceRetries?: number;
  /**
   * Where a piece is fetched when the origin's bytes for it fail verification, instead of from the
   * origin again: for an origin that is a copy which may have changed since it was verified (another
   * pull's destination), with the model's own origin as the fallback. `pieceRetries` then counts
   * the fallback's attempts.
   */
  fallbackOrigin?: Origin;
  hashThreads?: number;
  /**
   * Write pieces with O_DIRECT, past the page cache, where the destination's file system allows it
   * (src/piece/direct-io.ts). Default true.
   */
  directIo?: boolean;
  signal?: AbortSignal;
  onEvent?: (event: PullEvent) => void;
}

export type PullEvent =
  | {
      type: 'plan';
      trust: boolean;
      files: number;
      bytesTotal: number;
      piecesTotal: number;
      piecesReused: number;
      bytesReused: number;
      lanes: number;
      pieceSize: number;
    }
  | { type: 'state-discarded'; reason: string }
  | { type: 'progress'; bytesDone: number; bytesTotal: number; piecesDone: number; piecesTotal: number }
  | {
      type: 'piece-rejected';
      path: string;
      piece: number;
      attempt: number;
      reason: string;
      /** The `location` of the origin that sent the bytes. */
      origin: string;
    }
  | { type: 'file-complete'; path: string; size: number };

export interface PullResult {
  manifest: Manifest;
  manifestDigest: string;
  /** True when no manifest was given: the bytes are what the origin sent, checked only for consistency. */
  trust: boolean;
  bytesTotal: number;
  /** Bytes read from the origin in this run, rejected attempts included. */
  bytesFetched: number;
  piecesFetched: number;
  piecesReused: number;
  piecesRejected: number;
}

interface PullState {
  dest: string;
  stateDir: string;
  partialDir: string;
  trust: boolean;
  /** The manifest verified against, when there is one before the pull starts. */
  manifest: Manifest | undefined;
  /** The model's pieces; without a manifest its digests are placeholders the store learns. */
  map: PieceMap;
  store: PieceStore;
  fileReports: FileReports;
}

/** Files the store moved into place before the plan was announced (their events follow it). */
interface FileReports {
  /** Undefined once the plan is out: reports become events at once. */
  early: number[] | undefined;
}

export async function pull(origin: Origin, dest: string, options: PullOptions = {}): Promise<PullResult> {
  // Before anything else, so that a second pull into `dest` fails at once (destination.ts).
  const unlock = await lockDestination(dest);
  try {
    return await pullLocked(origin, dest, options);
  } finally {
    await unlock();
  }
}

/**
 * `pull` for a caller that holds the lock of `dest` already (lockDestination): a pull through the
 * agent that copies the agent's files into its destination. Taking the lock again here would find
 * this process's own PID, take it over as a dead pull's, and delete it at the end while the caller
 * still relies on it.
 */
export async function pullLocked(origin: Origin, dest: string, options: PullOptions): Promise<PullResult> {
  const controller = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
  const pool = new HashPool(options.hashThreads ?? hashThreadsDefault(origin));
  try {
    const state = await preparePull(origin, dest, options, pool, signal);
    return await runPull(origin, state, options, pool, controller, signal);
  } catch (error) {
    throw asIoError(error, `pulling into ${dest}`);
  } finally {
    await pool.close();
  }
}

async function preparePull(
  origin: Origin,
  dest: string,
  options: PullOptions,
  pool: HashPool,
  signal: AbortSignal,
): Promise<PullState> {
  const stateDir = join(dest, STATE_DIR_NAME);
  const partialDir = await pathWithoutSymlinks(dest, `${STATE_DIR_NAME}/partial`);
  const { manifest, trust } = await chooseManifest(origin, stateDir, options, signal);
  const pieceSize = manifest?.pieceSize ?? options.pieceSize ?? PIECE_SIZE_DEFAULT;
  checkPieceSize(pieceSize);
  const model = manifest ?? (await unknownDigests(origin, pieceSize, signal));
  // Created only once the source has answered, so a bad source leaves no directory behind (the lock's
  // own go again with it: destination.ts).
  await mkdir(partialDir, { recursive: true });
  const map = new PieceMap(model);
  // The store reports each file it moves into place; until the plan is out the reports wait.
  const fileReports: FileReports = { early: [] };
  const onFileFinished = (index: number): void => {
    if (fileReports.early !== undefined) fileReports.early.push(index);
    else fileComplete(map, index, options);
  };
  const store = await PieceStore.open(map, {
    dataDir: partialDir,
    stateDir,
    finalDir: dest,
    hashPool: pool,
    identity: pullIdentity(trust, model),
    stateFileName: 'pull.json',
    learnDigests: manifest === undefined,
    replaceMismatchedFinals: true,
    onFileFinished,
    directIo: options.directIo !== false && enableDirectIo(partialDir),
    checkSpace: true,
  });
  return { dest, stateDir, partialDir, trust, manifest, map, store, fileReports };
}

function fileComplete(map: PieceMap, index: number, options: PullOptions): void {
  const file = map.manifest.files[index];
  if (file !== undefined) options.onEvent?.({ type: 'file-complete', path: file.path, size: file.size });
}

async function chooseManifest(
  origin: Origin,
  stateDir: string,
  options: PullOptions,
  signal: AbortSignal,
): Promise<{ manifest: Manifest | undefined; trust: boolean }> {
  // A manifest handed in as an object gets the same hostile-input checks as one read from a file.
  if (options.manifest)
    return { manifest: parseManifest(encodeManifest(options.manifest), 'the manifest'), trust: false };
  // A previous trusting pull into this directory left its manifest: reuse it if the origin still matches.
  const saved = await readSavedManifest(stateDir);
  if (saved) {
    const listing = await origin.list({ signal });
    const same =
      listing.length === saved.files.length &&
      listing.every((entry, i) => entry.path === saved.files[i]?.path && entry.size === saved.files[i]?.size);
    if (same && (options.pieceSize === undefined || options.pieceSize === saved.pieceSize)) {
      return { manifest: saved, trust: true };
    }
  }
  if (origin.localPath !== undefined) {
    // A pull alone gains nothing from small pieces: its own manifest keeps the large default.
    const built = await buildManifest(origin, {
      signal,
      pieceSize: options.pieceSize ?? PIECE_SIZE_DEFAULT,
      ...(options.hashThreads !== undefined ? { threads: options.hashThreads } : {}),
    });
    return { manifest: built, trust: true };
  }
  return { manifest: undefined, trust: true };
}

async function readSavedManifest(stateDir: string): Promise<Manifest | undefined> {
  try {
    return parseManifest(await readFile(join(stateDir, 'manifest.json')), join(stateDir, 'manifest.json'));
  } catch {
    return undefined;
  }
}

/** The origin's files with their digests still unknown (empty strings the store learns from the bytes). */
async function unknownDigests(origin: Origin, pieceSize: number, signal: AbortSignal): Promise<Manifest> {
  const entries = await origin.list({ signal });
  const files = entries.map((entry): ManifestFile => {
    assertSafeRelativePath(entry.path, `origin ${origin.location}`);
    const pieces = new Array<string>(pieceCount(entry.size, pieceSize)).fill('');
    return { path: entry.path, size: entry.size, merkleRoot: '', pieces };
  });
  return { pieceSize, files };
}

/** What the partial state belongs to: the manifest, or in trust mode the origin's file list. */
function pullIdentity(trust: boolean, model: Manifest): string {
  const hash = createHash('sha256');
  hash.update(`${trust ? 'trust' : 'manifest'}\n${model.pieceSize}\n`);
  for (const file of model.files) hash.update(`${file.path}\n${file.size}\n${file.pieces.join(',')}\n`);
  return hash.digest('hex');
}

async function runPull(
  origin: Origin,
  state: PullState,
  options: PullOptions,
  pool: HashPool,
  controller: AbortController,
  signal: AbortSignal,
): Promise<PullResult> {
  const { map, store } = state;
  const counters = { bytesFetched: 0, piecesFetched: 0, piecesRejected: 0 };
  let failure: unknown;
  try {
    if (store.stateDiscarded) {
      options.onEvent?.({
        type: 'state-discarded',
        reason: 'the partial download belongs to a different model or manifest',
      });
    }
    const jobs: number[] = [];
    for (let piece = 0; piece < map.pieceCount; piece++) if (!store.has(piece)) jobs.push(piece);
    const lanes = laneCount(options, map.pieceSize, jobs.length);
    options.onEvent?.({
      type: 'plan',
      trust: state.trust,
      files: map.manifest.files.length,
      bytesTotal: map.totalBytes,
      piecesTotal: map.pieceCount,
      piecesReused: store.heldCount,
      bytesReused: store.heldBytes,
      lanes,
      pieceSize: map.pieceSize,
    });
    // Files with nothing left to fetch (empty, or complete in the partial directory) were finished
    // when the store opened.
    const early = state.fileReports.early ?? [];
    state.fileReports.early = undefined;
    for (const index of early) fileComplete(map, index, options);
    let next = 0;
    const lane = async (): Promise<void> => {
      const laneState: Lane = { buffer: undefined, start: 0 };
      for (let piece = jobs[next++]; piece !== undefined; piece = jobs[next++]) {
        if (signal.aborted) throw abortError(signal, 'the pull');
        await fetchPiece(origin, state, piece, laneState, { options, pool, counters, signal });
        options.onEvent?.({
          type: 'progress',
          bytesDone: store.heldBytes,
          bytesTotal: map.totalBytes,
          piecesDone: store.heldCount,
          piecesTotal: map.pieceCount,
        });
      }
    };
    const results = await Promise.allSettled(
      Array.from({ length: lanes }, () =>
        lane().catch((error: unknown) => {
          // The first failure stops every other lane; their aborts are not the story.
          failure ??= error;
          controller.abort(error);
          throw error;
        }),
      ),
    );
    if (results.some((r) => r.status === 'rejected')) throw failure;
  } finally {
    await store.close();
  }
  const manifest = await completedManifest(state);
  const digest = manifestDigest(manifest);
  await writeFile(join(state.stateDir, 'manifest.json'), encodeManifest(manifest));
  await rm(state.partialDir, { recursive: true, force: true });
  await rm(join(state.stateDir, 'journal'), { force: true });
  return {
    manifest,
    manifestDigest: digest,
    trust: state.trust,
    bytesTotal: map.totalBytes,
    bytesFetched: counters.bytesFetched,
    piecesFetched: counters.piecesFetched,
    piecesReused: map.pieceCount - counters.piecesFetched,
    piecesRejected: counters.piecesRejected,
  };
}

function laneCount(options: PullOptions, pieceSize: number, jobs: number): number {
  const concurrency = options.concurrency ?? CONCURRENCY_DEFAULT;
  const memoryBytes = options.memoryBytes ?? MEMORY_BYTES_DEFAULT;
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new WeightcastError('USAGE', `concurrency must be a positive integer, got ${concurrency}`);
  }
  const affordable = Math.floor(memoryBytes / pieceSize);
  if (affordable < 1) {
    throw new WeightcastError(
      'USAGE',
      `a memory budget of ${memoryBytes} bytes cannot hold one piece of ${pieceSize} bytes; raise --memory-mb`,
    );
  }
  return Math.max(1, Math.min(concurrency, affordable, jobs));
}

interface LaneContext {
  options: PullOptions;
  pool: HashPool;
  counters: { bytesFetched: number; piecesFetched: number; piecesRejected: number };
  signal: AbortSignal;
}

/** A lane's piece buffer, allocated on first use (local copies never need one). */
interface Lane {
  /** The lane's piece buffer (from pieceBuffer: aligned for direct I/O at `start`). */
  buffer: ArrayBuffer | undefined;
  start: number;
}

/**
 * Fetches one piece into the store, fetching it again if its bytes are wrong: from the fallback
 * origin when there is one, else from the origin again.
 */
async function fetchPiece(
  origin: Origin,
  state: PullState,
  piece: number,
  lane: Lane,
  context: LaneContext,
): Promise<void> {
  const fallback = context.options.fallbackOrigin;
  // The origin is a copy that may have changed: its wrong bytes would be the same again.
  if (fallback !== undefined && (await tryPiece(origin, state, piece, lane, context, 1)) === undefined)
    return;
  const source = fallback ?? origin;
  const retries = context.options.pieceRetries ?? PIECE_RETRIES_DEFAULT;
  for (let attempt = 1; ; attempt++) {
    const reason = await tryPiece(source, state, piece, lane, context, attempt);
    if (reason === undefined) return;
    if (attempt > retries) {
      const where = state.map.locate(piece);
      throw new WeightcastError(
        'PIECE_HASH_MISMATCH',
        `${where.file.path} piece ${where.piece}: the origin sent wrong bytes ${attempt} times (${reason}); nothing was written`,
        { file: where.file.path, piece: where.piece },
      );
    }
  }
}

/** One transfer of a piece from `origin`: undefined when the store kept it, else why it was rejected. */
async function tryPiece(
  origin: Origin,
  state: PullState,
  piece: number,
  lane: Lane,
  context: LaneContext,
  attempt: number,
): Promise<string | undefined> {
  const where = state.map.locate(piece);
  const { digest, stored } = await transferPiece(origin, state, piece, lane, context);
  context.counters.bytesFetched += where.length;
  if (stored) {
    context.counters.piecesFetched++;
    return undefined;
  }
  context.counters.piecesRejected++;
  const expected = state.store.digestOf(piece) ?? '';
  const reason = `SHA-256 ${digest.slice(0, 16)}… does not match the manifest's ${expected.slice(0, 16)}…`;
  context.options.onEvent?.({
    type: 'piece-rejected',
    path: where.file.path,
    piece: where.piece,
    attempt,
    reason,
    origin: origin.location,
  });
  return reason;
}

/**
 * Gives one piece to the store, which keeps it only if its digest is the expected one. Local origins
 * are copied by a hash worker (read once, hashed in cache, written from the same buffer); remote ones
 * are read into the lane's buffer, hashed on a worker and written from the main thread.
 */
async function transferPiece(
  origin: Origin,
  state: PullState,
  piece: number,
  lane: Lane,
  context: LaneContext,
): Promise<{ digest: string; stored: boolean }> {
  const where = state.map.locate(piece);
  if (origin.localPath !== undefined) {
    const source = origin.localPath(where.file.path);
    const { result, digest } = await state.store.copyFrom(piece, source, context.pool, context.signal);
    return { digest, stored: result !== 'corrupt' };
  }
  if (lane.buffer === undefined) {
    const view = pieceBuffer(state.map.pieceSize);
    lane.buffer = view.buffer as ArrayBuffer;
    lane.start = view.byteOffset;
  }
  const target = new Uint8Array(lane.buffer, lane.start, where.length);
  await origin.readInto(where.file.path, where.offset, target, { signal: context.signal });
  const sent = lane.buffer;
  const hashed = await context.pool.hashBuffer(sent, where.length, context.signal, lane.start);
  lane.buffer = hashed.buffer;
  carryAlignment(sent, lane.buffer);
  const bytes = new Uint8Array(lane.buffer, lane.start, where.length);
  const result = await state.store.put(piece, bytes, { digest: hashed.digest });
  return { digest: hashed.digest, stored: result !== 'corrupt' };
}

async function completedManifest(state: PullState): Promise<Manifest> {
  if (state.manifest) return state.manifest;
  const files: ManifestFile[] = [];
  for (const [index, work] of state.map.manifest.files.entries()) {
    const pieces = work.pieces.map((_, piece) => {
      const digest = state.store.digestOf(state.map.globalIndex(index, piece));
      if (digest === undefined)
        throw new Error(`weightcast invariant broken: ${work.path} piece ${piece} unverified at the end`);
      return digest;
    });
    const file: ManifestFile = { path: work.path, size: work.size, merkleRoot: merkleRoot(pieces), pieces };
    if (work.path.endsWith('.safetensors')) {
      const header = await readSafetensorsHeaderFromFile(join(state.dest, work.path)).catch(
        (error: unknown) => {
          if (isWeightcastError(error)) return undefined;
          throw error;
        },
      );
      if (header)
        file.tensors = header.tensors.map((t) => ({
          name: t.name,
          dtype: t.dtype,
          shape: t.shape,
          start: t.start,
          end: t.end,
        }));
    }
    files.push(file);
  }
  return { pieceSize: state.map.pieceSize, files };
}
