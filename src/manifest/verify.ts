/**
 * Checks a directory against a manifest: every file present with the right size, every piece's
 * SHA-256 equal to the manifest's. Reports which files and which pieces are bad rather than
 * stopping at the first problem, so an operator knows exactly what to fetch again. Files the
 * directory holds beyond the manifest's are listed too, as a note: they do not make it fail.
 */

import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { HashPool } from './hash-pool.js';
import { pieceCount, type Manifest, type ManifestFile } from './manifest.js';

export type FileVerdict = 'ok' | 'missing' | 'not-a-file' | 'size-mismatch' | 'corrupt';

export interface FileReport {
  path: string;
  verdict: FileVerdict;
  expectedSize: number;
  actualSize?: number;
  /** Indices of pieces whose digest differs (only for `corrupt`). */
  badPieces: number[];
}

export interface VerifyReport {
  ok: boolean;
  files: FileReport[];
  bytesChecked: number;
  /**
   * Files in the directory the manifest does not list, sorted, at most EXTRA_FILES_MAX; hidden
   * directories (a pull's `.weightcast` state, a hub cache) are not looked into.
   */
  extraFiles: string[];
}

/** The extra files a report lists at most: enough to tell what is there, bounded for huge trees. */
export const EXTRA_FILES_MAX = 1000;

export interface VerifyOptions {
  threads?: number;
  signal?: AbortSignal;
  onProgress?: (bytesDone: number, bytesTotal: number) => void;
}

const TASK_BYTES_TARGET = 64 * 1024 * 1024;

export async function verifyDirectory(
  dir: string,
  manifest: Manifest,
  options: VerifyOptions = {},
): Promise<VerifyReport> {
  const pool = new HashPool(options.threads);
  const total = manifest.files.reduce((sum, f) => sum + f.size, 0);
  let done = 0;
  const progress = (bytes: number): void => {
    done += bytes;
    options.onProgress?.(done, total);
  };
  try {
    const files = await Promise.all(
      manifest.files.map((file) =>
        verifyFile(join(dir, file.path), file, manifest.pieceSize, pool, progress, options.signal),
      ),
    );
    const listed = new Set(manifest.files.map((file) => file.path));
    const extraFiles = await filesNotListed(dir, listed);
    return { ok: files.every((f) => f.verdict === 'ok'), files, bytesChecked: done, extraFiles };
  } finally {
    await pool.close();
  }
}

async function verifyFile(
  path: string,
  file: ManifestFile,
  pieceSize: number,
  pool: HashPool,
  progress: (bytes: number) => void,
  signal: AbortSignal | undefined,
): Promise<FileReport> {
  const report: FileReport = { path: file.path, verdict: 'ok', expectedSize: file.size, badPieces: [] };
  let actualSize: number;
  try {
    const stats = await stat(path);
    // A directory's size is its block size (4096): reported as a size mismatch it misled.
    if (!stats.isFile()) return { ...report, verdict: 'not-a-file' };
    actualSize = stats.size;
  } catch {
    return { ...report, verdict: 'missing' };
  }
  if (actualSize !== file.size) return { ...report, verdict: 'size-mismatch', actualSize };
  const piecesPerTask = Math.max(1, Math.floor(TASK_BYTES_TARGET / pieceSize));
  const tasks: Promise<void>[] = [];
  for (let first = 0; first < pieceCount(file.size, pieceSize); first += piecesPerTask) {
    const offset = first * pieceSize;
    const length = Math.min(file.size - offset, piecesPerTask * pieceSize);
    tasks.push(
      pool.hashFileRange(path, offset, length, pieceSize, signal ? { signal } : {}).then(({ digests }) => {
        digests.forEach((digest, i) => {
          if (digest !== file.pieces[first + i]) report.badPieces.push(first + i);
        });
        progress(length);
      }),
    );
  }
  await Promise.all(tasks);
  report.badPieces.sort((a, b) => a - b);
  return { ...report, actualSize, verdict: report.badPieces.length > 0 ? 'corrupt' : 'ok' };
}

/** Regular files under `dir` whose relative paths are not in `listed`, breadth first, bounded. */
async function filesNotListed(dir: string, listed: ReadonlySet<string>): Promise<string[]> {
  const extra: string[] = [];
  const pending = [''];
  for (let next = pending.shift(); next !== undefined; next = pending.shift()) {
    const entries = await readdir(join(dir, next), { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const path = next === '' ? entry.name : `${next}/${entry.name}`;
      if (entry.isDirectory()) {
        if (!entry.name.startsWith('.')) pending.push(path);
      } else if (entry.isFile() && !listed.has(path)) {
        extra.push(path);
        if (extra.length >= EXTRA_FILES_MAX) return extra.sort();
      }
    }
  }
  return extra.sort();
}
