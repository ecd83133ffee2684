/**
 * A child process for the piece layer's kill -9 test: opens a PieceStore and stores pieces 0, 1, 2,
 * ... of a model from its source directory, one way (`inline`, `digest` from a hash worker, `copy`
 * by a hash worker, `direct` from an aligned buffer), printing each piece's number once `put` returned, then waits to be killed.
 * Argument: a JSON file { manifest, source, options, way, count }.
 */

import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { HashPool } from '../../src/manifest/hash-pool.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { PieceStore, type PieceStoreOptions } from '../../src/piece/store.js';
import { enableDirectIo, pieceBuffer } from '../../src/piece/direct-io.js';

/** `direct`: inline, from a buffer aligned for O_DIRECT (pieceBuffer), into a store with directIo. */
export type StoreWay = 'inline' | 'digest' | 'copy' | 'direct';

export interface StoreWriterJob {
  manifest: Manifest;
  source: string;
  options: PieceStoreOptions;
  way: StoreWay;
  count: number;
}

/** Stores `piece` the given way; returns what the store said. */
export async function storePiece(
  store: PieceStore,
  pool: HashPool,
  source: string,
  piece: number,
  way: StoreWay,
  bytesOf?: (piece: number) => Promise<Uint8Array>,
): Promise<string> {
  const where = store.map.locate(piece);
  const path = join(source, where.file.path);
  if (way === 'copy') return (await store.copyFrom(piece, path, pool)).result;
  const bytes =
    bytesOf === undefined
      ? (await readFile(path)).subarray(where.offset, where.offset + where.length)
      : await bytesOf(piece);
  if (way === 'inline') return store.put(piece, bytes);
  if (way === 'direct') {
    enableDirectIo(source);
    const aligned = pieceBuffer(bytes.length);
    aligned.set(bytes);
    return store.put(piece, aligned);
  }
  const buffer = new ArrayBuffer(bytes.length);
  new Uint8Array(buffer).set(bytes);
  const hashed = await pool.hashBuffer(buffer, bytes.length);
  return store.put(piece, new Uint8Array(hashed.buffer), { digest: hashed.digest });
}

async function main(): Promise<void> {
  const job = JSON.parse(await readFile(process.argv[2] ?? '', 'utf8')) as StoreWriterJob;
  const pool = new HashPool(1);
  const store = await PieceStore.open(new PieceMap(job.manifest), job.options);
  for (let piece = 0; piece < job.count; piece++) {
    await storePiece(store, pool, job.source, piece, job.way);
    process.stdout.write(`${piece}\n`);
  }
  // Held open (no close, no sync) until the parent kills the process.
  setInterval(() => undefined, 1000);
}

if (process.argv[1]?.endsWith('store-writer.js') === true) await main();
