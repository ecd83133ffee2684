/**
 * Writes a synthetic Hugging Face checkpoint into a directory. planSynth decides everything but the
 * bytes; here each shard's layout is planned, then the destination is checked before anything is
 * written: it must hold no model files the new model would not replace (model-directory.ts), and its
 * file system must have room for the files (space.ts). Then each shard's tensor bytes are generated
 * into one of two large chunk buffers and appended through SafetensorsFileWriter. While one chunk is
 * being written the next is generated, so the disk never waits for the CPU; memory stays at two
 * chunks plus the value pools, whatever the model size. The small JSON files follow the shards.
 */

import { mkdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError, abortError, assert, isWeightcastError, throwIfAborted } from '../errors.js';
import {
  SafetensorsFileWriter,
  planSafetensorsLayout,
  type SafetensorsLayout,
} from '../format/safetensors-writer.js';
import { refuseStaleModelFiles } from '../format/model-directory-file.js';
import type { ModelDims, SynthArch, SynthDtype, SynthTensor } from './architectures.js';
import { planSynth, type SynthOptions } from './plan.js';
import { checkFreeSpace, freeSpaceAt, type PlannedFile } from '../util/free-space.js';
import { ValueGenerator } from './values.js';

/** Large enough for sequential disk throughput, small enough to keep memory flat. */
export const CHUNK_BYTES = 8 * 1024 * 1024;

export interface SynthProgress {
  file: string;
  bytesWritten: number;
  bytesTotal: number;
}

export interface SynthRunOptions {
  signal?: AbortSignal;
  onProgress?: (progress: SynthProgress) => void;
}

export interface SynthFile {
  /** Relative to the model directory. */
  path: string;
  size: number;
}

export interface SynthResult {
  dir: string;
  arch: SynthArch;
  dtype: SynthDtype;
  seed: number;
  dims: ModelDims;
  /** Sorted by path. */
  files: SynthFile[];
  /** Bytes of all files written. */
  totalBytes: number;
  /** Bytes of tensor data alone, the index's metadata.total_size. */
  tensorBytes: number;
  tensorCount: number;
  parameterCount: number;
}

export async function synthesizeModel(
  options: SynthOptions & { dir: string },
  run: SynthRunOptions = {},
): Promise<SynthResult> {
  const { signal } = run;
  throwIfAborted(signal, 'synth');
  const plan = planSynth(options);
  const shards = plan.shards.map((shard) => ({
    file: shard.file,
    tensors: shard.tensors,
    layout: planSafetensorsLayout(shard.tensors, { format: 'pt' }),
  }));
  const textFiles = plan.textFiles.map(({ name, text }) => ({ name, bytes: Buffer.from(text, 'utf8') }));
  const bytesTotal =
    shards.reduce((sum, shard) => sum + shard.layout.fileSize, 0) +
    textFiles.reduce((sum, file) => sum + file.bytes.length, 0);
  const planned = [
    ...shards.map((shard) => ({ name: shard.file, bytes: shard.layout.fileSize })),
    ...textFiles.map((file) => ({ name: file.name, bytes: file.bytes.length })),
  ];
  await guardIo(options.dir, signal, () => checkDestination(options.dir, planned));
  throwIfAborted(signal, 'synth');
  const progress = new ProgressCounter(bytesTotal, run.onProgress);
  await guardIo(options.dir, signal, () => mkdir(options.dir, { recursive: true }));
  const stream = new ShardStreamer(new ValueGenerator(plan.seed), progress, signal);
  const files: SynthFile[] = [];
  for (const shard of shards) {
    const path = join(options.dir, shard.file);
    await guardIo(path, signal, () => stream.write(path, shard.file, shard.layout, shard.tensors));
    files.push({ path: shard.file, size: shard.layout.fileSize });
  }
  for (const file of textFiles) {
    const path = join(options.dir, file.name);
    await guardIo(path, signal, () => writeFile(path, file.bytes, signal === undefined ? {} : { signal }));
    progress.add(file.name, file.bytes.length);
    files.push({ path: file.name, size: file.bytes.length });
  }
  files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return {
    dir: options.dir,
    arch: plan.arch,
    dtype: plan.dtype,
    seed: plan.seed,
    dims: plan.dims,
    files,
    totalBytes: bytesTotal,
    tensorBytes: plan.tensorBytes,
    tensorCount: plan.tensorCount,
    parameterCount: plan.parameterCount,
  };
}

/**
 * Refuses, before anything is written: model files of another model that would stay beside this
 * one (USAGE), and a file system without room for the files, counting the space of the files they
 * replace (IO).
 */
async function checkDestination(
  dir: string,
  planned: readonly { name: string; bytes: number }[],
): Promise<void> {
  const names = new Set(
    await refuseStaleModelFiles(
      dir,
      planned.map((file) => file.name),
    ),
  );
  const files: PlannedFile[] = [];
  for (const file of planned) {
    const replacedBytes = names.has(file.name) ? await sizeOf(join(dir, file.name)) : 0;
    files.push({ bytes: file.bytes, replacedBytes });
  }
  checkFreeSpace({
    dir,
    files,
    ...(await freeSpaceAt(dir)),
    beyond: ' more than the files it replaces',
  });
}

/** A regular file's size; anything else (a directory in the way) frees nothing, and fails later. */
async function sizeOf(path: string): Promise<number> {
  const found = await stat(path).catch(() => undefined);
  return found?.isFile() === true ? found.size : 0;
}

class ProgressCounter {
  private bytesWritten = 0;

  constructor(
    private readonly bytesTotal: number,
    private readonly listener: ((progress: SynthProgress) => void) | undefined,
  ) {}

  add(file: string, bytes: number): void {
    this.bytesWritten += bytes;
    this.listener?.({ file, bytesWritten: this.bytesWritten, bytesTotal: this.bytesTotal });
  }
}

/** Generates tensor bytes into two alternating chunk buffers, reused across shards. */
class ShardStreamer {
  private readonly buffers: readonly [Buffer, Buffer] = [
    Buffer.allocUnsafeSlow(CHUNK_BYTES),
    Buffer.allocUnsafeSlow(CHUNK_BYTES),
  ];

  constructor(
    private readonly generator: ValueGenerator,
    private readonly progress: ProgressCounter,
    private readonly signal: AbortSignal | undefined,
  ) {}

  async write(path: string, file: string, layout: SafetensorsLayout, tensors: SynthTensor[]): Promise<void> {
    const byName = new Map(tensors.map((tensor) => [tensor.name, tensor]));
    const writer = await SafetensorsFileWriter.create(path, layout);
    this.progress.add(file, layout.header.length);
    let pending: Promise<void> | undefined;
    try {
      let current: 0 | 1 = 0;
      let filled = 0;
      // At most one write is in flight: the writer tracks its position, and the next chunk is
      // generated synchronously while the previous one is on its way to the disk.
      const flush = async (length: number): Promise<void> => {
        await pending;
        const chunk = this.buffers[current].subarray(0, length);
        pending = writer.write(chunk, this.signal).then(() => this.progress.add(file, length));
        current = current === 0 ? 1 : 0;
        filled = 0;
      };
      for (const planned of layout.tensors) {
        const tensor = byName.get(planned.name);
        assert(tensor !== undefined, `${planned.name} is in the layout but not in the plan`);
        const size = planned.end - planned.begin;
        for (let offset = 0; offset < size;) {
          const buffer = this.buffers[current];
          const length = Math.min(size - offset, CHUNK_BYTES - filled);
          this.generator.fill(buffer.subarray(filled, filled + length), tensor, offset);
          filled += length;
          offset += length;
          if (filled === CHUNK_BYTES) await flush(filled);
        }
      }
      if (filled > 0) await flush(filled);
      await pending;
      await writer.close();
    } catch (error) {
      // A shard whose header promises more bytes than it holds would only mislead later readers.
      await pending?.catch(() => undefined);
      await writer.abandon();
      await rm(path, { force: true });
      throw error;
    }
  }
}

/** Abort stays ABORTED, our errors pass through, and anything the file system throws becomes IO. */
async function guardIo<T>(
  file: string,
  signal: AbortSignal | undefined,
  action: () => Promise<T>,
): Promise<T> {
  try {
    return await action();
  } catch (error) {
    if (isWeightcastError(error)) throw error;
    if (signal?.aborted === true) throw abortError(signal, 'synth');
    const message = error instanceof Error ? error.message : String(error);
    throw new WeightcastError('IO', `${file}: ${message}`, { file }, { cause: error });
  }
}
