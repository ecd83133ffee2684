/**
 * Builds a manifest from an origin. Files are listed, split into pieces and hashed on every core:
 * for local files the hash workers read the bytes themselves (each byte read once, never copied
 * between threads); for remote origins pieces are fetched into a bounded set of buffers and handed to
 * the workers by transfer. safetensors files also get their tensor index (two small header reads).
 */

import { WeightcastError, throwIfAborted } from '../errors.js';
import { readSafetensorsHeader } from '../format/safetensors.js';
import type { Origin, OriginEntry } from '../origin/origin.js';
import { HashPool } from './hash-pool.js';
import {
  defaultPieceSize,
  PIECE_SIZE_MAX,
  PIECE_SIZE_MIN,
  pieceCount,
  type Manifest,
  type ManifestFile,
  type ManifestTensor,
} from './manifest.js';
import { merkleRoot } from './merkle.js';

export interface BuildManifestOptions {
  /** Default: `defaultPieceSize` of the model's total size. */
  pieceSize?: number;
  /** Also compute each file's whole SHA-256 (`sha256sum`-compatible). Costs a second hash per byte. */
  fileSha256?: boolean;
  /** Hash threads; defaults to the number of cores. */
  threads?: number;
  /** Remote origins: pieces fetched at once. */
  concurrency?: number;
  signal?: AbortSignal;
  onProgress?: (bytesDone: number, bytesTotal: number) => void;
}

/** Local hashing works in ranges of this many bytes (rounded to whole pieces) to spread the load. */
const TASK_BYTES_TARGET = 64 * 1024 * 1024;

export function checkPieceSize(pieceSize: number): void {
  if (!Number.isInteger(pieceSize) || pieceSize < PIECE_SIZE_MIN || pieceSize > PIECE_SIZE_MAX) {
    throw new WeightcastError(
      'USAGE',
      `piece size must be an integer between ${PIECE_SIZE_MIN} and ${PIECE_SIZE_MAX} bytes, got ${pieceSize}`,
    );
  }
}

export async function buildManifest(origin: Origin, options: BuildManifestOptions = {}): Promise<Manifest> {
  if (options.pieceSize !== undefined) checkPieceSize(options.pieceSize);
  const entries = await origin.list(options.signal ? { signal: options.signal } : {});
  const pieceSize =
    options.pieceSize ?? defaultPieceSize(entries.reduce((sum, entry) => sum + entry.size, 0));
  const pool = new HashPool(options.threads);
  try {
    const progress = progressCounter(entries, options.onProgress);
    const localPath = origin.localPath?.bind(origin);
    const hashed =
      localPath === undefined
        ? await hashRemoteFiles(origin, entries, pieceSize, pool, progress, options)
        : await Promise.all(
            entries.map((entry) =>
              hashLocalFile(localPath(entry.path), entry, pieceSize, pool, progress, options),
            ),
          );
    const files: ManifestFile[] = [];
    for (const [index, entry] of entries.entries()) {
      const result = hashed[index] as { digests: string[]; fileSha256?: string };
      const file: ManifestFile = {
        path: entry.path,
        size: entry.size,
        merkleRoot: merkleRoot(result.digests),
        pieces: result.digests,
      };
      if (result.fileSha256 !== undefined) file.sha256 = result.fileSha256;
      if (entry.path.endsWith('.safetensors'))
        file.tensors = await tensorIndex(origin, entry, options.signal);
      files.push(file);
    }
    return { pieceSize, files };
  } finally {
    await pool.close();
  }
}

function progressCounter(
  entries: readonly OriginEntry[],
  onProgress: BuildManifestOptions['onProgress'],
): (bytes: number) => void {
  const total = entries.reduce((sum, e) => sum + e.size, 0);
  let done = 0;
  return (bytes) => {
    done += bytes;
    onProgress?.(done, total);
  };
}

async function hashLocalFile(
  path: string,
  entry: OriginEntry,
  pieceSize: number,
  pool: HashPool,
  progress: (bytes: number) => void,
  options: BuildManifestOptions,
): Promise<{ digests: string[]; fileSha256?: string }> {
  const signalOption = options.signal ? { signal: options.signal } : {};
  // The whole-file digest is inherently sequential: it runs as one job of its own, queued before the
  // piece jobs, so the pool hashes pieces on the other threads meanwhile (the file is read twice, the
  // second time from the page cache).
  const whole =
    options.fileSha256 === true
      ? pool.hashFileRange(path, 0, entry.size, pieceSize, {
          wholeFile: true,
          pieces: false,
          ...signalOption,
        })
      : undefined;
  const piecesPerTask = Math.max(1, Math.floor(TASK_BYTES_TARGET / pieceSize));
  const tasks: Promise<string[]>[] = [];
  for (let first = 0; first < pieceCount(entry.size, pieceSize); first += piecesPerTask) {
    const offset = first * pieceSize;
    const length = Math.min(entry.size - offset, piecesPerTask * pieceSize);
    tasks.push(
      pool.hashFileRange(path, offset, length, pieceSize, signalOption).then((r) => {
        progress(length);
        return r.digests;
      }),
    );
  }
  const digests = (await Promise.all(tasks)).flat();
  if (whole === undefined) return { digests };
  const { fileSha256 } = await whole;
  return fileSha256 === undefined ? { digests } : { digests, fileSha256 };
}

/**
 * Remote origins: one flat queue of pieces over all files, worked by `concurrency` lanes, each with
 * one piece buffer, so memory stays at concurrency x pieceSize however many files there are.
 */
async function hashRemoteFiles(
  origin: Origin,
  entries: readonly OriginEntry[],
  pieceSize: number,
  pool: HashPool,
  progress: (bytes: number) => void,
  options: BuildManifestOptions,
): Promise<Array<{ digests: string[] }>> {
  const results = entries.map((entry) => ({ digests: new Array<string>(pieceCount(entry.size, pieceSize)) }));
  const jobs = entries.flatMap((entry, fileIndex) =>
    Array.from({ length: pieceCount(entry.size, pieceSize) }, (_, piece) => ({ entry, fileIndex, piece })),
  );
  const callOptions = options.signal ? { signal: options.signal } : {};
  let next = 0;
  const lane = async (): Promise<void> => {
    let buffer = new ArrayBuffer(pieceSize);
    for (let job = jobs[next++]; job !== undefined; job = jobs[next++]) {
      throwIfAborted(options.signal, 'building the manifest');
      const start = job.piece * pieceSize;
      const length = Math.min(pieceSize, job.entry.size - start);
      await origin.readInto(job.entry.path, start, new Uint8Array(buffer, 0, length), callOptions);
      const hashed = await pool.hashBuffer(buffer, length, options.signal);
      buffer = hashed.buffer;
      (results[job.fileIndex] as { digests: string[] }).digests[job.piece] = hashed.digest;
      progress(length);
    }
  };
  const lanes = Math.max(1, Math.min(jobs.length, options.concurrency ?? 4));
  await Promise.all(Array.from({ length: lanes }, lane));
  return results;
}

async function tensorIndex(
  origin: Origin,
  entry: OriginEntry,
  signal: AbortSignal | undefined,
): Promise<ManifestTensor[]> {
  const read = async (offset: number, length: number): Promise<Uint8Array> => {
    const target = new Uint8Array(length);
    await origin.readInto(entry.path, offset, target, signal ? { signal } : {});
    return target;
  };
  const header = await readSafetensorsHeader(read, entry.size, entry.path, signal ? { signal } : {});
  return header.tensors.map((t) => ({
    name: t.name,
    dtype: t.dtype,
    shape: t.shape,
    start: t.start,
    end: t.end,
  }));
}
