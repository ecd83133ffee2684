/**
 * Single-host verified pull: origin -> piece buffers -> SHA-256 -> partial files -> final names.
 *
 * How data moves: the work queue holds every piece not yet verified. `lanes` workers each own one
 * piece-sized buffer (so memory is lanes x pieceSize whatever the model size); a lane reads a piece
 * from the origin into its buffer, hands the buffer to a hash thread, compares the digest with the
 * manifest, writes the piece at its offset in the file's partial copy under `.weightcast/partial/`,
 * and appends it to the journal. A piece with wrong bytes is fetched again (a few times) and never
 * written. When every piece of a file is verified the partial file is synced and renamed to its final
 * name, so a file under its final name is always complete and verified.
 *
 * Without a manifest the pull trusts the origin: a local origin is hashed first to build one; a remote
 * origin's pieces are hashed as they arrive and the manifest is written at the end.
 */

import { createHash } from 'node:crypto';
import { mkdir, open, readFile, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
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
import { JournalWriter, bootId, readJournal, type JournalRecord } from '../piece/journal.js';
import { moveToFinalName, Writeback, writeFully } from '../piece/final-file.js';

export { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT };
export const PIECE_RETRIES_DEFAULT = 3;
export const STATE_DIR_NAME = '.weightcast';

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
  hashThreads?: number;
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
  | { type: 'piece-rejected'; path: string; piece: number; attempt: number; reason: string }
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

interface FileWork {
  index: number;
  path: string;
  size: number;
  /** Expected digests; undefined entries are learnt from the origin (trust mode). */
  expected: Array<string | undefined>;
  verified: Array<string | undefined>;
  remaining: number;
  handle?: Promise<FileHandle>;
  /** Background flushes of its partial file (final-file.ts); set with the handle. */
  writeback?: Writeback;
  done: boolean;
}

interface PullState {
  dest: string;
  stateDir: string;
  partialDir: string;
  pieceSize: number;
  trust: boolean;
  /** The manifest verified against, when there is one before the pull starts. */
  manifest: Manifest | undefined;
  files: FileWork[];
}

export async function pull(origin: Origin, dest: string, options: PullOptions = {}): Promise<PullResult> {
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
  const files = manifest ? filesFromManifest(manifest) : await filesFromOrigin(origin, pieceSize, signal);
  // Created only once the source has answered, so a bad source leaves no directory behind.
  await mkdir(partialDir, { recursive: true });
  const state: PullState = { dest, stateDir, partialDir, pieceSize, trust, manifest, files };
  const identity = pullIdentity(state);
  await reconcileState(state, identity, options, pool, signal);
  return state;
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

function filesFromManifest(manifest: Manifest): FileWork[] {
  return manifest.files.map((file, index) => newFileWork(index, file.path, file.size, [...file.pieces]));
}

async function filesFromOrigin(origin: Origin, pieceSize: number, signal: AbortSignal): Promise<FileWork[]> {
  const entries = await origin.list({ signal });
  return entries.map((entry, index) => {
    assertSafeRelativePath(entry.path, `origin ${origin.location}`);
    return newFileWork(
      index,
      entry.path,
      entry.size,
      new Array<string | undefined>(pieceCount(entry.size, pieceSize)).fill(undefined),
    );
  });
}

function newFileWork(
  index: number,
  path: string,
  size: number,
  expected: Array<string | undefined>,
): FileWork {
  return {
    index,
    path,
    size,
    expected,
    verified: new Array<string | undefined>(expected.length).fill(undefined),
    remaining: expected.length,
    done: false,
  };
}

/** What the partial state belongs to: the manifest, or in trust mode the origin's file list. */
function pullIdentity(state: PullState): string {
  const hash = createHash('sha256');
  hash.update(`${state.trust ? 'trust' : 'manifest'}\n${state.pieceSize}\n`);
  for (const file of state.files) hash.update(`${file.path}\n${file.size}\n${file.expected.join(',')}\n`);
  return hash.digest('hex');
}

/**
 * Brings the on-disk state in line with this pull: discards partial state of a different pull,
 * restores verified pieces from the journal (re-hashing them after a reboot), and recognises files
 * that are already complete under their final names.
 */
async function reconcileState(
  state: PullState,
  identity: string,
  options: PullOptions,
  pool: HashPool,
  signal: AbortSignal,
): Promise<void> {
  const statePath = join(state.stateDir, 'pull.json');
  const journalPath = join(state.stateDir, 'journal');
  const boot = await bootId();
  let previous: { identity?: string; boot?: string } = {};
  try {
    previous = JSON.parse(await readFile(statePath, 'utf8')) as typeof previous;
  } catch {
    previous = {};
  }
  if (previous.identity !== undefined && previous.identity !== identity) {
    options.onEvent?.({
      type: 'state-discarded',
      reason: 'the partial download belongs to a different model or manifest',
    });
    await rm(state.partialDir, { recursive: true, force: true });
    await rm(journalPath, { force: true });
    await mkdir(state.partialDir, { recursive: true });
  }
  const rehash = previous.boot !== undefined && previous.boot !== boot;
  const journal = groupJournal(await readJournal(journalPath), state.files);
  await writeFile(statePath, JSON.stringify({ identity, boot }) + '\n');
  for (const file of state.files) {
    const records = journal.get(file.index) ?? new Map<number, string>();
    const partialPath = join(state.partialDir, file.path);
    const partialExists = (await stat(partialPath).catch(() => undefined)) !== undefined;
    // Journal lines only describe a partial file that still exists; once renamed, the final file speaks.
    if (partialExists) await restorePieces(state, file, records, rehash, pool, signal);
    if (file.remaining === 0 && file.size > 0 && partialExists) continue;
    const reference = file.expected.map((digest, piece) => digest ?? records.get(piece));
    if (await adoptCompleteFile(state, file, reference, pool, signal)) {
      await rm(partialPath, { force: true });
    }
  }
}

/** Journal records by file and piece, keeping the first valid record of each piece. */
function groupJournal(
  records: readonly JournalRecord[],
  files: readonly FileWork[],
): Map<number, Map<number, string>> {
  const byFile = new Map<number, Map<number, string>>();
  for (const record of records) {
    const file = files[record.file];
    if (file === undefined || record.piece >= file.expected.length) continue;
    const expected = file.expected[record.piece];
    if (expected !== undefined && expected !== record.digest) continue;
    const pieces = byFile.get(record.file) ?? new Map<number, string>();
    if (!pieces.has(record.piece)) pieces.set(record.piece, record.digest);
    byFile.set(record.file, pieces);
  }
  return byFile;
}

async function restorePieces(
  state: PullState,
  file: FileWork,
  records: ReadonlyMap<number, string>,
  rehash: boolean,
  pool: HashPool,
  signal: AbortSignal,
): Promise<void> {
  const partialPath = join(state.partialDir, file.path);
  for (const [piece, digest] of records) {
    if (rehash) {
      const { start, length } = pieceSpan(file, state.pieceSize, piece);
      const actual = await pool
        .hashFileRange(partialPath, start, length, state.pieceSize, { signal })
        .then((r) => r.digests[0])
        .catch(() => undefined);
      if (actual !== digest) continue;
    }
    file.verified[piece] = digest;
    file.remaining--;
  }
}

/**
 * A file already at its final name whose every piece matches `reference` (the manifest's digests,
 * or in trust mode the journal's) needs nothing fetched. Returns whether the file was adopted.
 */
async function adoptCompleteFile(
  state: PullState,
  file: FileWork,
  reference: ReadonlyArray<string | undefined>,
  pool: HashPool,
  signal: AbortSignal,
): Promise<boolean> {
  const finalPath = await pathWithoutSymlinks(state.dest, file.path);
  const info = await stat(finalPath).catch(() => undefined);
  if (info === undefined) return false;
  if (info.isDirectory()) {
    throw new WeightcastError(
      'PULL_DESTINATION_CONFLICT',
      `${finalPath} is a directory, but the model has a file there`,
      {
        file: file.path,
      },
    );
  }
  if (info.size !== file.size || reference.some((digest) => digest === undefined)) return false;
  const { digests } =
    file.size === 0
      ? { digests: [] as string[] }
      : await pool.hashFileRange(finalPath, 0, file.size, state.pieceSize, { signal });
  if (!digests.every((digest, i) => digest === reference[i])) return false;
  file.verified = [...digests];
  file.remaining = 0;
  file.done = true;
  return true;
}

function pieceSpan(file: FileWork, pieceSize: number, piece: number): { start: number; length: number } {
  const start = piece * pieceSize;
  return { start, length: Math.min(pieceSize, file.size - start) };
}

async function runPull(
  origin: Origin,
  state: PullState,
  options: PullOptions,
  pool: HashPool,
  controller: AbortController,
  signal: AbortSignal,
): Promise<PullResult> {
  const jobs: Array<{ file: FileWork; piece: number }> = [];
  for (const file of state.files) {
    file.verified.forEach((digest, piece) => {
      if (digest === undefined) jobs.push({ file, piece });
    });
  }
  const lanes = laneCount(options, state.pieceSize, jobs.length);
  const piecesTotal = state.files.reduce((sum, f) => sum + f.expected.length, 0);
  const bytesTotal = state.files.reduce((sum, f) => sum + f.size, 0);
  const counters = {
    bytesFetched: 0,
    piecesFetched: 0,
    piecesRejected: 0,
    bytesDone: 0,
    piecesDone: piecesTotal - jobs.length,
  };
  counters.bytesDone =
    bytesTotal - jobs.reduce((sum, job) => sum + pieceSpan(job.file, state.pieceSize, job.piece).length, 0);
  options.onEvent?.({
    type: 'plan',
    trust: state.trust,
    files: state.files.length,
    bytesTotal,
    piecesTotal,
    piecesReused: counters.piecesDone,
    bytesReused: counters.bytesDone,
    lanes,
    pieceSize: state.pieceSize,
  });
  const journal = await JournalWriter.open(join(state.stateDir, 'journal'));
  let failure: unknown;
  try {
    // Files with nothing left to fetch (empty, or complete in the partial directory) finish first.
    for (const file of state.files)
      if (!file.done && file.remaining === 0) await finishFile(state, file, options);
    let next = 0;
    const lane = async (): Promise<void> => {
      const laneState: Lane = { buffer: undefined };
      for (let job = jobs[next++]; job !== undefined; job = jobs[next++]) {
        if (signal.aborted) throw abortError(signal, 'the pull');
        await fetchPiece(origin, state, job.file, job.piece, laneState, {
          options,
          pool,
          journal,
          counters,
          signal,
        });
        counters.piecesDone++;
        counters.bytesDone += pieceSpan(job.file, state.pieceSize, job.piece).length;
        options.onEvent?.({
          type: 'progress',
          bytesDone: counters.bytesDone,
          bytesTotal,
          piecesDone: counters.piecesDone,
          piecesTotal,
        });
        if (job.file.remaining === 0) await finishFile(state, job.file, options);
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
    await journal.close().catch(() => undefined);
    await closeHandles(state);
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
    bytesTotal,
    bytesFetched: counters.bytesFetched,
    piecesFetched: counters.piecesFetched,
    piecesReused: piecesTotal - counters.piecesFetched,
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
  journal: JournalWriter;
  counters: { bytesFetched: number; piecesFetched: number; piecesRejected: number };
  signal: AbortSignal;
}

/** A lane's piece buffer, allocated on first use (local copies never need one). */
interface Lane {
  buffer: ArrayBuffer | undefined;
}

/** Fetches, verifies, writes and journals one piece, fetching it again if its bytes are wrong. */
async function fetchPiece(
  origin: Origin,
  state: PullState,
  file: FileWork,
  piece: number,
  lane: Lane,
  context: LaneContext,
): Promise<void> {
  const { start, length } = pieceSpan(file, state.pieceSize, piece);
  const retries = context.options.pieceRetries ?? PIECE_RETRIES_DEFAULT;
  const expected = file.expected[piece];
  for (let attempt = 1; ; attempt++) {
    const { digest, written } = await transferPiece(
      origin,
      state,
      file,
      start,
      length,
      expected,
      lane,
      context,
    );
    context.counters.bytesFetched += length;
    if (written) {
      file.writeback ??= new Writeback(() => partialHandle(state, file));
      file.writeback.wrote(length, file.remaining <= 1);
      await context.journal.append({ file: file.index, piece, digest });
      file.verified[piece] = digest;
      file.remaining--;
      context.counters.piecesFetched++;
      return;
    }
    context.counters.piecesRejected++;
    const reason = `SHA-256 ${digest.slice(0, 16)}… does not match the manifest's ${(expected ?? '').slice(0, 16)}…`;
    context.options.onEvent?.({ type: 'piece-rejected', path: file.path, piece, attempt, reason });
    if (attempt > retries) {
      throw new WeightcastError(
        'PIECE_HASH_MISMATCH',
        `${file.path} piece ${piece}: the origin sent wrong bytes ${attempt} times (${reason}); nothing was written`,
        { file: file.path, piece },
      );
    }
  }
}

/**
 * Moves one piece into the partial file if, and only if, its digest is the expected one. Local
 * origins are copied by a hash worker (read once, hashed in cache, written from the same buffer);
 * remote ones are read into the lane's buffer, hashed on a worker and written from the main thread.
 */
async function transferPiece(
  origin: Origin,
  state: PullState,
  file: FileWork,
  start: number,
  length: number,
  expected: string | undefined,
  lane: Lane,
  context: LaneContext,
): Promise<{ digest: string; written: boolean }> {
  if (origin.localPath !== undefined) {
    await partialHandle(state, file);
    const source = origin.localPath(file.path);
    const dest = join(state.partialDir, file.path);
    return context.pool.copyPiece(source, dest, start, length, expected, context.signal);
  }
  lane.buffer ??= new ArrayBuffer(state.pieceSize);
  await origin.readInto(file.path, start, new Uint8Array(lane.buffer, 0, length), { signal: context.signal });
  const hashed = await context.pool.hashBuffer(lane.buffer, length, context.signal);
  lane.buffer = hashed.buffer;
  const written = expected === undefined || hashed.digest === expected;
  if (written) await writePiece(state, file, start, new Uint8Array(lane.buffer, 0, length));
  return { digest: hashed.digest, written };
}

async function writePiece(
  state: PullState,
  file: FileWork,
  position: number,
  bytes: Uint8Array,
): Promise<void> {
  await writeFully(await partialHandle(state, file), bytes, position);
}

function partialHandle(state: PullState, file: FileWork): Promise<FileHandle> {
  file.handle ??= (async () => {
    const path = await pathWithoutSymlinks(state.partialDir, file.path);
    await mkdir(dirname(path), { recursive: true });
    // 'a+' would ignore positions; open for update, creating without truncating what is there.
    const handle = await open(path, 'r+').catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== 'ENOENT') throw error;
      return open(path, 'w+');
    });
    await handle.truncate(file.size);
    return handle;
  })();
  return file.handle;
}

/** Syncs a fully verified partial file and moves it to its final name. */
async function finishFile(state: PullState, file: FileWork, options: PullOptions): Promise<void> {
  if (file.done) return;
  file.done = true;
  const handle = await partialHandle(state, file);
  await file.writeback?.settled();
  await moveToFinalName(handle, join(state.partialDir, file.path), state.dest, file.path);
  await handle.close();
  delete file.handle;
  options.onEvent?.({ type: 'file-complete', path: file.path, size: file.size });
}

async function closeHandles(state: PullState): Promise<void> {
  for (const file of state.files) {
    const pending = file.handle;
    delete file.handle;
    await file.writeback?.settled();
    if (pending) await pending.then((h) => h.close()).catch(() => undefined);
  }
}

async function completedManifest(state: PullState): Promise<Manifest> {
  if (state.manifest) return state.manifest;
  const files: ManifestFile[] = [];
  for (const work of state.files) {
    const pieces = work.verified.map((digest, piece) => {
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
  return { pieceSize: state.pieceSize, files };
}
