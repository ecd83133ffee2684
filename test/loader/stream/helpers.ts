/**
 * Fixtures for the streaming loader's tests: a tiny synthetic checkpoint in a temp directory, its
 * manifest with small pieces, and an origin wrapper that can delay, fail or corrupt reads and counts
 * the reads in flight, so tests can see that nothing is left running.
 */

import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { WeightcastError } from '../../../src/errors.js';
import { readSafetensorsHeaderFromFile } from '../../../src/format/safetensors.js';
import { buildManifest } from '../../../src/manifest/build.js';
import type { Manifest } from '../../../src/manifest/manifest.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import type { Origin, OriginCallOptions, OriginEntry } from '../../../src/origin/origin.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';

export const PIECE_BYTES = 64 * 1024;

export interface TinyModel {
  dir: string;
  manifest: Manifest;
  /** Tensor name -> its bytes, read straight from the files. */
  tensors: Map<string, Buffer>;
  cleanup(): Promise<void>;
}

/** About 2.6 MiB of llama tensors (the largest 128 KiB) in three shards, with a manifest of 64 KiB pieces. */
export async function tinyModel(label: string): Promise<TinyModel> {
  const temp = await tempDir(`loader-${label}`);
  const dir = join(temp.path, 'model');
  await synthesizeModel({ dir, arch: 'llama', shards: 3, seed: 7, hidden: 128, layers: 6, vocab: 512 });
  const origin = new LocalOrigin(dir);
  const manifest = await buildManifest(origin, { pieceSize: PIECE_BYTES, threads: 1 });
  await origin.close();
  const tensors = new Map<string, Buffer>();
  for (const name of await readdir(dir)) {
    if (!name.endsWith('.safetensors')) continue;
    const bytes = await readFile(join(dir, name));
    const header = await readSafetensorsHeaderFromFile(join(dir, name));
    for (const t of header.tensors) tensors.set(t.name, bytes.subarray(t.start, t.end));
  }
  return { dir, manifest, tensors, cleanup: temp.cleanup };
}

export interface ReadFault {
  /** Return a typed error to fail this read, or `corrupt` to flip its first byte after reading. */
  (path: string, offset: number, length: number, attempt: number): WeightcastError | 'corrupt' | undefined;
}

/** Wraps an origin: optional per-file delays and faults, and counters of reads in flight. */
export class ProbeOrigin implements Origin {
  readonly location: string;
  active = 0;
  activeMax = 0;
  bytesDone = 0;
  reads = 0;
  /** Called after every completed read, with the cumulative bytes read. */
  onRead: ((bytesDone: number) => void) | undefined;
  private readonly attempts = new Map<string, number>();

  constructor(
    private readonly inner: Origin,
    private readonly options: { delayMs?: (path: string) => number; fault?: ReadFault } = {},
  ) {
    this.location = inner.location;
  }

  list(options?: OriginCallOptions): Promise<OriginEntry[]> {
    return this.inner.list(options);
  }

  stat(path: string, options?: OriginCallOptions): Promise<OriginEntry> {
    return this.inner.stat(path, options);
  }

  async readInto(
    path: string,
    offset: number,
    target: Uint8Array,
    options?: OriginCallOptions,
  ): Promise<void> {
    this.active++;
    this.activeMax = Math.max(this.activeMax, this.active);
    try {
      const delay = this.options.delayMs?.(path) ?? 0;
      if (delay > 0) await sleep(delay);
      const key = `${path}@${offset}`;
      const attempt = (this.attempts.get(key) ?? 0) + 1;
      this.attempts.set(key, attempt);
      const fault = this.options.fault?.(path, offset, target.length, attempt);
      if (fault instanceof WeightcastError) throw fault;
      await this.inner.readInto(path, offset, target, options);
      if (fault === 'corrupt' && target.length > 0) target[0] = (target[0] as number) ^ 0xff;
      this.reads++;
      this.bytesDone += target.length;
      this.onRead?.(this.bytesDone);
    } finally {
      this.active--;
    }
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

/** Open file descriptors of this process (Linux), to show that a load leaves none behind. */
export async function openFdCount(): Promise<number> {
  return (await readdir('/proc/self/fd')).length;
}
