/**
 * The I/O shell of parallelism plans, and the only file in this folder that touches the disk: reads a
 * local model directory's config and safetensors headers into a plan's input, hashes every slice of a
 * plan in one sequential pass per tensor (bounded by a chunk size, whatever the tensor's size), reads a
 * rank's slice through its byte ranges, and writes and reads plan manifests.
 */

import { createHash } from 'node:crypto';
import { open, readFile, readdir, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError, asIoError, throwIfAborted } from '../../errors.js';
import { INDEX_FILE_NAME, indexShardFiles } from '../../format/index-json.js';
import { readIndexJson } from '../../format/index-json-file.js';
import { readSafetensorsHeaderFromFile } from '../../format/safetensors.js';
import { expandRuns } from './byte-ranges.js';
import { readPlanModel } from './model-config.js';
import {
  TensorSliceHasher,
  encodePlanManifest,
  parsePlanManifest,
  planManifestFrom,
  type PlanManifest,
} from './plan-manifest.js';
import type { ParallelPlan, PlanModel, RankTensor, SourceTensor, TensorSlice } from './types.js';

export const CONFIG_FILE_NAME = 'config.json';
const CONFIG_BYTES_MAX = 16 * 1024 * 1024;
/** Hashing reads tensors in chunks of whole rows of about this size. */
export const HASH_CHUNK_BYTES = 8 * 1024 * 1024;
const SAFETENSORS_SUFFIX = '.safetensors';

export interface ModelDirectory {
  dir: string;
  model: PlanModel;
  tensors: SourceTensor[];
  /** The shards, relative to dir, with their sizes. */
  files: Array<{ path: string; size: number }>;
}

export interface ReadOptions {
  signal?: AbortSignal;
}

/** Reads config.json and every shard's header: the index's shards, or every top-level .safetensors file. */
export async function readModelDirectory(dir: string, options: ReadOptions = {}): Promise<ModelDirectory> {
  const { signal } = options;
  const model = readPlanModel(await readConfig(dir, signal));
  const shards = await shardNames(dir, signal);
  const tensors: SourceTensor[] = [];
  const files: Array<{ path: string; size: number }> = [];
  for (const shard of shards) {
    throwIfAborted(signal, 'reading safetensors headers');
    const header = await readSafetensorsHeaderFromFile(join(dir, shard), options);
    files.push({ path: shard, size: header.fileSize });
    for (const entry of header.tensors) {
      tensors.push({
        name: entry.name,
        file: shard,
        dtype: entry.dtype,
        shape: entry.shape,
        start: entry.start,
        end: entry.end,
      });
    }
  }
  return { dir, model, tensors, files };
}

async function readConfig(dir: string, signal: AbortSignal | undefined): Promise<unknown> {
  const path = join(dir, CONFIG_FILE_NAME);
  let text: string;
  try {
    const info = await stat(path);
    if (info.size > CONFIG_BYTES_MAX)
      throw new WeightcastError(
        'PLAN_UNSUPPORTED_MODEL',
        `${path} is larger than ${CONFIG_BYTES_MAX} bytes`,
        { file: path },
      );
    text = await readFile(path, { encoding: 'utf8', ...(signal === undefined ? {} : { signal }) });
  } catch (error) {
    if (error instanceof WeightcastError) throw error;
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `${path} cannot be read: a plan needs the model's config`,
      { file: path },
      { cause: error },
    );
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `${path} is not valid JSON`,
      { file: path },
      { cause: error },
    );
  }
}

async function shardNames(dir: string, signal: AbortSignal | undefined): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (error) {
    throw asIoError(error, `listing ${dir}`);
  }
  if (names.includes(INDEX_FILE_NAME)) {
    return indexShardFiles(
      await readIndexJson(join(dir, INDEX_FILE_NAME), signal === undefined ? {} : { signal }),
    );
  }
  const shards = names.filter((name) => name.endsWith(SAFETENSORS_SUFFIX)).sort();
  if (shards.length === 0) {
    throw new WeightcastError(
      'USAGE',
      `${dir} holds no ${SAFETENSORS_SUFFIX} files and no ${INDEX_FILE_NAME}`,
      { file: dir },
    );
  }
  return shards;
}

/**
 * SHA-256 of every distinct slice the plan names (by sliceKey), reading each tensor once, in chunks of
 * whole rows, and feeding every slice of it at the same time.
 */
export async function hashPlanSlices(
  source: ModelDirectory,
  plan: ParallelPlan,
  options: ReadOptions & { chunkBytes?: number } = {},
): Promise<Map<string, string>> {
  const wanted = new Map<string, Array<TensorSlice | null>>();
  for (const rank of plan.ranks) {
    for (const tensor of rank.tensors) {
      const slices = wanted.get(tensor.name) ?? [];
      slices.push(tensor.slice);
      wanted.set(tensor.name, slices);
    }
  }
  const digests = new Map<string, string>();
  const byFile = new Map<string, SourceTensor[]>();
  for (const tensor of source.tensors) {
    if (!wanted.has(tensor.name)) continue;
    byFile.set(tensor.file, [...(byFile.get(tensor.file) ?? []), tensor]);
  }
  for (const [file, tensors] of byFile) {
    await withFile(join(source.dir, file), async (handle) => {
      for (const tensor of tensors.sort((a, b) => a.start - b.start)) {
        throwIfAborted(options.signal, 'hashing plan slices');
        const hasher = new TensorSliceHasher(tensor, wanted.get(tensor.name) ?? []);
        await feedRows(handle, tensor, hasher, options.chunkBytes ?? HASH_CHUNK_BYTES);
        for (const [key, digest] of hasher.digests()) digests.set(key, digest);
      }
    });
  }
  return digests;
}

async function feedRows(
  handle: FileHandle,
  tensor: SourceTensor,
  hasher: TensorSliceHasher,
  chunkBytes: number,
): Promise<void> {
  if (hasher.rowBytes === 0) return;
  const rowsPerChunk = Math.max(1, Math.floor(chunkBytes / hasher.rowBytes));
  const buffer = Buffer.allocUnsafe(Math.min(rowsPerChunk, hasher.rows) * hasher.rowBytes);
  for (let row = 0; row < hasher.rows; row += rowsPerChunk) {
    const length = Math.min(rowsPerChunk, hasher.rows - row) * hasher.rowBytes;
    await readExactly(handle, buffer, length, tensor.start + row * hasher.rowBytes, tensor.name);
    hasher.update(buffer.subarray(0, length));
  }
}

/** The plan manifest of a plan over a local directory: every slice of every rank hashed. */
export async function buildPlanManifest(
  source: ModelDirectory,
  plan: ParallelPlan,
  options: ReadOptions = {},
): Promise<PlanManifest> {
  return planManifestFrom(plan, source.files, await hashPlanSlices(source, plan, options));
}

/** Writes the canonical bytes; returns the manifest's digest (`sha256:<hex>`), the SHA-256 of the file. */
export async function writePlanManifest(path: string, manifest: PlanManifest): Promise<string> {
  const bytes = encodePlanManifest(manifest);
  try {
    await writeFile(path, bytes);
  } catch (error) {
    throw asIoError(error, `writing ${path}`);
  }
  return 'sha256:' + createHash('sha256').update(bytes).digest('hex');
}

export interface ReadPlanManifestOptions extends ReadOptions {
  /** When given, the file's SHA-256 must equal it (`sha256:<hex>` or bare hex). */
  expectedDigest?: string;
}

export async function readPlanManifest(
  path: string,
  options: ReadPlanManifestOptions = {},
): Promise<PlanManifest> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path, options.signal === undefined ? {} : { signal: options.signal });
  } catch (error) {
    throw asIoError(error, `reading plan manifest ${path}`);
  }
  if (options.expectedDigest !== undefined) {
    const expected = options.expectedDigest.replace(/^sha256:/, '').toLowerCase();
    const actual = createHash('sha256').update(bytes).digest('hex');
    if (actual !== expected) {
      throw new WeightcastError(
        'PLAN_MANIFEST_DIGEST_MISMATCH',
        `${path}: SHA-256 is sha256:${actual}, expected sha256:${expected}`,
        {
          file: path,
          expected,
          actual,
        },
      );
    }
  }
  return parsePlanManifest(bytes, path);
}

/** A rank's slice of one tensor, read through its byte ranges and concatenated in order. */
export async function readRankTensor(
  dir: string,
  tensor: RankTensor,
  options: ReadOptions = {},
): Promise<Buffer> {
  const out = Buffer.alloc(tensor.bytes);
  await withFile(join(dir, tensor.file), async (handle) => {
    let position = 0;
    for (const [start, end] of expandRuns(tensor.ranges)) {
      throwIfAborted(options.signal, `reading ${tensor.name}`);
      await readExactly(
        handle,
        out.subarray(position, position + (end - start)),
        end - start,
        start,
        tensor.name,
      );
      position += end - start;
    }
  });
  return out;
}

async function withFile<T>(path: string, body: (handle: FileHandle) => Promise<T>): Promise<T> {
  let handle: FileHandle;
  try {
    handle = await open(path, 'r');
  } catch (error) {
    throw asIoError(error, `opening ${path}`);
  }
  try {
    return await body(handle);
  } finally {
    await handle.close();
  }
}

async function readExactly(
  handle: FileHandle,
  buffer: Uint8Array,
  length: number,
  position: number,
  tensor: string,
): Promise<void> {
  let done = 0;
  while (done < length) {
    const { bytesRead } = await handle.read(buffer, done, length - done, position + done);
    if (bytesRead === 0) {
      throw new WeightcastError(
        'SAFETENSORS_TRUNCATED',
        `tensor ${tensor}: the file ends before its bytes do`,
        { tensor },
      );
    }
    done += bytesRead;
  }
}
