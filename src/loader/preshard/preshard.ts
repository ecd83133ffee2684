/**
 * The pre-sharder's I/O shell: turns a checkpoint into per-rank `sharded_state` files, streaming.
 *
 * How data moves:
 *   1. Plan (pure). Headers and config.json give the tensor index and the model; the parallel plan
 *      (src/loader/plan) gives each rank's slices; layout.ts turns them into output tensors (fused,
 *      padded, quantised); units.ts groups the source tensors into read units and checks that the
 *      memory budget holds the largest unit, the largest output being built and any staging copy.
 *   2. Main pass. One read stream (src/loader/stream) reads every streamed unit once into its arena.
 *      As each unit arrives, every rank's outputs that come from it are built (build.ts: views of the
 *      arena where possible, else one scratch buffer at a time), hashed and appended to that rank's
 *      ShardedStateWriter (src/loader/sharded-state). The arena space goes back when the next unit is
 *      asked for, so back-pressure bounds memory.
 *   3. Staged units (fused parts in different files) are read next, one small stream each, copied
 *      into a staging buffer until the unit is complete, then built the same way.
 *   4. Every writer finishes (parts renamed into place); config (with quantization_config when FP8
 *      weights were written) and tokenizer files are copied; the pre-shard manifest and the weightcast
 *      manifest of the output directory are written last.
 *
 * An error or an abort stops the stream (which cancels its reads) and abandons every writer, so no
 * partial rank file is left under a final name.
 */

import { createHash } from 'node:crypto';
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError, asIoError, assert, throwIfAborted } from '../../errors.js';
import { buildManifest } from '../../manifest/build.js';
import { writeManifest, type Manifest } from '../../manifest/manifest.js';
import { openOrigin, type OpenOriginOptions } from '../../origin/open.js';
import type { Origin } from '../../origin/origin.js';
import { buildParallelPlan } from '../plan/build.js';
import { readPlanModel } from '../plan/model-config.js';
import type { ParallelPlan, PlanModel, SourceTensor } from '../plan/types.js';
import { PART_BYTES_MAX_DEFAULT, ShardedStateWriter } from '../sharded-state/writer.js';
import { checkFreeSpace, freeSpaceAt } from '../../util/free-space.js';
import { closeModelSource, openModelSource, type ModelSource } from '../stream/model-source.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT, ReadStream } from '../stream/read-stream.js';
import type { ReadRequest, StreamStats } from '../stream/types.js';
import { AmaxCache, Scratch, buildOutput, type SourceBytes } from './build.js';
import {
  planPreshardLayout,
  type OutputTensor,
  type PreshardLayout,
  type PreshardLayoutPlan,
  type PreshardQuantisation,
} from './layout.js';
import {
  PRESHARD_MANIFEST_FORMAT,
  PRESHARD_MANIFEST_VERSION,
  encodePreshardManifest,
  manifestTensor,
  type PreshardManifest,
  type WrittenTensor,
} from './manifest.js';
import { OUTPUT_MANIFEST_NAME, PRESHARD_MANIFEST_NAME, RANK_PART_PATTERN } from './naming.js';
import { checkMemory, planReadUnits, type MemoryPlan, type ReadUnits, type StagedUnit } from './units.js';
import { pieceDigest } from '../../piece/verify.js';

const CONFIG_FILE = 'config.json';
/** Config and tokenizer files are small; past this a file is not one. */
const COPIED_FILE_BYTES_MAX = 64 * 1024 * 1024;
/** Files beside the weights that engines read: config, generation settings, tokenizer. */
const COPIED_FILE =
  /^(config\.json|generation_config\.json|special_tokens_map\.json|added_tokens\.json|tokenizer[^/]*|vocab\.[^/]+|merges\.txt|chat_template[^/]*|[^/]+\.tiktoken)$/;

export interface PreshardOptions {
  tp: number;
  pp?: number;
  layout?: PreshardLayout;
  quantize?: PreshardQuantisation;
  /** Bytes of buffers at once: read arena, the output being built, staging. */
  memoryBytes?: number;
  /** Tensor bytes per part file (default 5 GiB). */
  partBytesMax?: number;
  /** Ranged reads in flight; 1 makes the order of tensors in part files, and so every byte, reproducible. */
  concurrency?: number;
  /** Verify every byte read against this manifest of the source; without it the origin is trusted. */
  manifest?: Manifest;
  /** Also write the weightcast manifest of the output directory (default true). */
  outputManifest?: boolean;
  origin?: OpenOriginOptions;
  signal?: AbortSignal;
  onProgress?: (bytesDone: number, bytesTotal: number) => void;
}

export interface PreshardRankResult {
  rank: number;
  files: string[];
  tensors: number;
  bytes: number;
}

export interface PreshardResult {
  to: string;
  architecture: string;
  tp: number;
  pp: number;
  layout: PreshardLayout;
  quantize: PreshardQuantisation;
  ranks: PreshardRankResult[];
  copied: string[];
  /** Bytes of source tensors some rank needed, and bytes the streams read (gaps included). */
  sourceBytes: number;
  bytesRead: number;
  bytesWritten: number;
  memory: MemoryPlan;
  /** Read buffers at their peak plus the scratch reserve (and, for a staged unit, its staging copy). */
  residentBytesPeak: number;
  stagedUnits: number;
  /** Every byte read was verified against the source's manifest. */
  verified: boolean;
  /** Pieces verified by the streams (whole pieces around the tensors). */
  piecesVerified: number;
  manifestFile: string;
  /** `sha256:<hex>` of the output directory's weightcast manifest, when written. */
  outputManifestDigest: string | null;
  seconds: number;
}

interface RunState {
  writers: ShardedStateWriter[];
  written: WrittenTensor[][];
  /** Per unit id: each rank's outputs built from it, with the scale tensor of an FP8 weight. */
  work: Map<number, Array<{ rank: number; output: OutputTensor; scale: OutputTensor | undefined }>>;
  /** The one buffer outputs are built in, sized for the largest. */
  scratch: Scratch;
  signal: AbortSignal | undefined;
  bytesWritten: number;
}

export async function preshard(
  source: string | Origin,
  to: string,
  options: PreshardOptions,
): Promise<PreshardResult> {
  const started = performance.now();
  const { signal } = options;
  const { manifest } = options;
  const files = manifest?.files.map((file) => ({ path: file.path, size: file.size }));
  const origin =
    typeof source === 'string'
      ? openOrigin(source, { ...options.origin, ...(files === undefined ? {} : { files }) })
      : source;
  try {
    const model = await openModelSource(origin, {
      ...signalOption(signal),
      ...(manifest === undefined ? {} : { manifest }),
    });
    try {
      return await run(model, to, options, started);
    } finally {
      await closeModelSource(model);
    }
  } finally {
    if (typeof source === 'string') await origin.close();
  }
}

interface Planned {
  configText: string;
  model: PlanModel;
  plan: ParallelPlan;
  layout: PreshardLayoutPlan;
  units: ReadUnits;
  memory: MemoryPlan;
}

/** Everything decided before a tensor byte is read (pure but for reading config.json). */
async function planRun(source: ModelSource, options: PreshardOptions): Promise<Planned> {
  const configText = await readSmallFile(source, CONFIG_FILE, options.signal);
  const model = readPlanModel(parseJson(configText, CONFIG_FILE));
  const tensors = sourceTensors(source);
  const plan = buildParallelPlan({ tensors, model }, { tp: options.tp, pp: options.pp ?? 1 });
  const layout = planPreshardLayout(plan, model, tensors, {
    layout: options.layout ?? 'hf',
    quantize: options.quantize ?? 'none',
  });
  const units = planReadUnits(layout);
  const memoryBytes = options.memoryBytes ?? MEMORY_BYTES_DEFAULT;
  const memory = checkMemory(layout, units, memoryBytes, source.pieceSize);
  return { configText, model, plan, layout, units, memory };
}

interface PassTotals {
  bytesRead: number;
  piecesVerified: number;
  residentBytesPeak: number;
}

async function run(
  source: ModelSource,
  to: string,
  options: PreshardOptions,
  started: number,
): Promise<PreshardResult> {
  const { signal } = options;
  const partBytesMax = options.partBytesMax ?? PART_BYTES_MAX_DEFAULT;
  const planned = await planRun(source, options);
  const { plan, layout, units, memory } = planned;
  await prepareDestination(
    to,
    layout.ranks.reduce((sum, rank) => sum + rank.tensors.reduce((bytes, t) => bytes + t.bytes, 0), 0),
  );
  const state: RunState = {
    writers: plan.ranks.map(
      (rank) => new ShardedStateWriter(to, rank.rank, { partBytesMax, ...signalOption(signal) }),
    ),
    written: plan.ranks.map(() => []),
    work: workByUnit(layout, units),
    scratch: new Scratch(memory.scratchBytes),
    signal,
    bytesWritten: 0,
  };
  try {
    const totals = await readAndWrite(source, planned, options, state);
    const parts = [];
    for (const writer of state.writers) parts.push(await writer.finish(signalOption(signal)));
    await removeOtherRanks(to, plan.ranks.length);
    const copied = await copyFiles(source, to, planned.configText, layout, signal);
    const manifest = preshardManifest(planned, state, parts, copied, partBytesMax);
    await writeAtomically(join(to, PRESHARD_MANIFEST_NAME), encodePreshardManifest(manifest));
    const outputManifestDigest =
      options.outputManifest === false ? null : await writeOutputManifest(to, signal);
    return {
      to,
      architecture: planned.model.architecture,
      tp: plan.tp,
      pp: plan.pp,
      layout: layout.options.layout,
      quantize: layout.options.quantize,
      ranks: manifest.ranks.map((rank) => ({
        rank: rank.rank,
        files: rank.files.map((file) => file.path),
        tensors: rank.tensors.length,
        bytes: rank.tensors.reduce((total, tensor) => total + tensor.bytes, 0),
      })),
      copied,
      sourceBytes: [...layout.sources.values()].reduce((total, t) => total + t.end - t.start, 0),
      bytesWritten: state.bytesWritten,
      memory,
      ...totals,
      stagedUnits: units.staged.length,
      verified: source.verified,
      manifestFile: PRESHARD_MANIFEST_NAME,
      outputManifestDigest,
      seconds: (performance.now() - started) / 1000,
    };
  } catch (error) {
    for (const writer of state.writers) await writer.abandon();
    throw error;
  }
}

/** The main pass, then each staged unit; resident bytes are the streams' peaks plus scratch and staging. */
async function readAndWrite(
  source: ModelSource,
  { units, memory }: Planned,
  options: PreshardOptions,
  state: RunState,
): Promise<PassTotals> {
  const progress = progressOf(units, options.onProgress);
  const main = await mainPass(source, units, memory, options, state, progress);
  const totals: PassTotals = {
    bytesRead: main.bytesRead,
    piecesVerified: main.piecesVerified,
    residentBytesPeak: main.residentBytesPeak + memory.scratchBytes,
  };
  for (const unit of units.staged) {
    const staged = await stagedPass(source, unit, memory, options, state, progress);
    totals.bytesRead += staged.bytesRead;
    totals.piecesVerified += staged.piecesVerified;
    totals.residentBytesPeak = Math.max(
      totals.residentBytesPeak,
      unit.bytes + staged.residentBytesPeak + memory.scratchBytes,
    );
  }
  return totals;
}

function signalOption(signal: AbortSignal | undefined): { signal?: AbortSignal } {
  return signal === undefined ? {} : { signal };
}

function sourceTensors(model: ModelSource): SourceTensor[] {
  const tensors: SourceTensor[] = [];
  for (const index of model.safetensors.values()) {
    for (const tensor of index.tensors) tensors.push({ ...tensor, shape: [...tensor.shape] });
  }
  return tensors;
}

function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `${file} is not valid JSON`,
      { file },
      { cause: error },
    );
  }
}

async function readSmallFile(
  model: ModelSource,
  path: string,
  signal: AbortSignal | undefined,
): Promise<string> {
  const entry = model.files.find((file) => file.path === path);
  if (entry === undefined) {
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `the model has no ${path}: pre-sharding needs its config`,
      {
        file: path,
      },
    );
  }
  return (await readFileBytes(model, path, entry.size, signal)).toString('utf8');
}

async function readFileBytes(
  model: ModelSource,
  path: string,
  size: number,
  signal: AbortSignal | undefined,
): Promise<Buffer> {
  if (size > COPIED_FILE_BYTES_MAX) {
    throw new WeightcastError(
      'LIMIT_EXCEEDED',
      `${path} is ${size} bytes, more than a config or tokenizer file`,
      {
        file: path,
      },
    );
  }
  const bytes = Buffer.alloc(size);
  if (size > 0) await model.origin.readInto(path, 0, bytes, signalOption(signal));
  checkPieces(model, path, bytes);
  return bytes;
}

/** With a manifest, a small file read whole is checked piece by piece before anything uses it. */
function checkPieces(model: ModelSource, path: string, bytes: Buffer): void {
  const pieces = model.files.find((file) => file.path === path)?.pieces;
  const { pieceSize } = model;
  if (pieces === undefined || pieceSize === undefined) return;
  for (const [index, expected] of pieces.entries()) {
    const piece = bytes.subarray(index * pieceSize, (index + 1) * pieceSize);
    const actual = pieceDigest(piece);
    if (actual !== expected) {
      throw new WeightcastError(
        'PIECE_HASH_MISMATCH',
        `${path}: piece ${index} has SHA-256 ${actual}, the manifest says ${expected}`,
        { file: path, piece: index },
      );
    }
  }
}

/** The destination may be new, empty, or an earlier pre-shard output (overwritten); nothing else. */
/**
 * Refuses a destination that holds something other than an earlier pre-shard output
 * (PRESHARD_DESTINATION_CONFLICT), or whose file system lacks room for `outputBytes` of tensors
 * (IO, before anything is written; the parts are written beside an earlier run's, then renamed).
 */
async function prepareDestination(to: string, outputBytes: number): Promise<void> {
  let names: string[] = [];
  try {
    names = await readdir(to);
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ENOENT') throw asIoError(error, `listing ${to}`);
  }
  if (names.length > 0 && !names.includes(PRESHARD_MANIFEST_NAME)) {
    throw new WeightcastError(
      'PRESHARD_DESTINATION_CONFLICT',
      `${to} is not empty and holds no earlier pre-shard output; choose an empty or new directory`,
      { file: to },
    );
  }
  checkFreeSpace({ dir: to, files: [{ bytes: outputBytes, replacedBytes: 0 }], ...(await freeSpaceAt(to)) });
  try {
    await mkdir(to, { recursive: true });
  } catch (error) {
    throw asIoError(error, `creating ${to}`);
  }
}

function workByUnit(layout: PreshardLayoutPlan, units: ReadUnits): RunState['work'] {
  const work: RunState['work'] = new Map();
  for (const rank of layout.ranks) {
    const byName = new Map(rank.tensors.map((tensor) => [tensor.name, tensor]));
    for (const output of rank.tensors) {
      if (output.encoding.kind === 'fp8-scale') continue;
      const first = output.components[0]?.source;
      const unit = first === undefined ? undefined : units.unitOf.get(first);
      assert(unit !== undefined, `output ${output.name} has a read unit`);
      const scale = output.encoding.kind === 'fp8' ? byName.get(output.encoding.scale) : undefined;
      const list = work.get(unit) ?? [];
      list.push({ rank: rank.rank, output, scale });
      work.set(unit, list);
    }
  }
  return work;
}

type Progress = (bytes: number) => void;

function progressOf(units: ReadUnits, report: PreshardOptions['onProgress']): Progress {
  const total =
    units.streamed.reduce((sum, unit) => sum + unit.end - unit.start, 0) +
    units.staged.reduce((sum, unit) => sum + unit.bytes, 0);
  let done = 0;
  return (bytes) => {
    done += bytes;
    report?.(done, total);
  };
}

async function mainPass(
  model: ModelSource,
  units: ReadUnits,
  memory: MemoryPlan,
  options: PreshardOptions,
  state: RunState,
  progress: Progress,
): Promise<StreamStats> {
  const requests: Array<ReadRequest<number>> = units.streamed.map((unit) => ({
    file: unit.file,
    ranges: [{ start: unit.start, end: unit.end }],
    tag: unit.id,
  }));
  const stream = new ReadStream(model.origin, model.files, requests, {
    memoryBytes: memory.streamBytes,
    concurrency: options.concurrency ?? CONCURRENCY_DEFAULT,
    ...(model.pieceSize === undefined ? {} : { pieceSize: model.pieceSize }),
    describe: (id) =>
      `read unit ${units.streamed[id]?.tensors.map((tensor) => tensor.name).join(', ') ?? id}`,
    ...signalOption(options.signal),
  });
  try {
    for await (const { request, bytes } of stream) {
      const unit = units.streamed[request.tag];
      assert(unit !== undefined, 'a delivered unit was planned');
      const views = new Map<string, SourceBytes>();
      for (const tensor of unit.tensors) {
        views.set(tensor.name, {
          tensor,
          bytes: bytes.subarray(tensor.start - unit.start, tensor.end - unit.start),
        });
      }
      await processUnit(unit.id, views, state);
      progress(bytes.length);
    }
  } finally {
    await stream.return();
  }
  return stream.stats;
}

/** A unit whose parts are in different files: read by its own stream, staged until complete. */
async function stagedPass(
  model: ModelSource,
  unit: StagedUnit,
  memory: MemoryPlan,
  options: PreshardOptions,
  state: RunState,
  progress: Progress,
): Promise<StreamStats> {
  const staging = new Map<string, SourceBytes>();
  const requests: Array<ReadRequest<SourceTensor>> = unit.tensors.map((tensor) => ({
    file: tensor.file,
    ranges: [{ start: tensor.start, end: tensor.end }],
    tag: tensor,
  }));
  const stream = new ReadStream(model.origin, model.files, requests, {
    memoryBytes: memory.memoryBytes - memory.scratchBytes - unit.bytes,
    concurrency: options.concurrency ?? CONCURRENCY_DEFAULT,
    ...(model.pieceSize === undefined ? {} : { pieceSize: model.pieceSize }),
    describe: (tensor) => `tensor ${tensor.name}`,
    ...signalOption(options.signal),
  });
  try {
    for await (const { request, bytes } of stream) {
      staging.set(request.tag.name, { tensor: request.tag, bytes: Buffer.from(bytes) });
      progress(bytes.length);
    }
  } finally {
    await stream.return();
  }
  await processUnit(unit.id, staging, state);
  return stream.stats;
}

async function processUnit(
  unit: number,
  views: ReadonlyMap<string, SourceBytes>,
  state: RunState,
): Promise<void> {
  const lookup = (name: string): SourceBytes => {
    const found = views.get(name);
    assert(found !== undefined, `source ${name} is in its read unit`);
    return found;
  };
  const amax = new AmaxCache();
  for (const { rank, output, scale } of state.work.get(unit) ?? []) {
    throwIfAborted(state.signal, 'pre-sharding');
    const built = buildOutput(output, lookup, amax, state.scratch);
    await addTensor(state, rank, output, built.bytes);
    if (scale !== undefined) {
      assert(built.scale !== undefined, `${output.name} was built with its scale`);
      await addTensor(state, rank, scale, built.scale);
    }
  }
}

async function addTensor(
  state: RunState,
  rank: number,
  output: OutputTensor,
  bytes: Uint8Array,
): Promise<void> {
  const writer = state.writers[rank];
  assert(writer !== undefined && bytes.length === output.bytes, `rank ${rank} writes ${output.name} whole`);
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  await writer.add(output.name, output.dtype, output.shape, bytes, signalOption(state.signal));
  state.written[rank]?.push({ output, file: '', sha256 });
  state.bytesWritten += bytes.length;
}

function preshardManifest(
  { plan, model, layout }: Planned,
  state: RunState,
  parts: ReadonlyArray<{ parts: ReadonlyArray<{ file: string; tensors: string[]; fileBytes: number }> }>,
  copied: string[],
  partBytesMax: number,
): PreshardManifest {
  return {
    format: PRESHARD_MANIFEST_FORMAT,
    version: PRESHARD_MANIFEST_VERSION,
    architecture: model.architecture,
    tp: plan.tp,
    pp: plan.pp,
    layout: layout.options.layout,
    quantize: layout.options.quantize,
    partBytesMax,
    copied,
    ranks: plan.ranks.map((rank) => {
      const rankParts = parts[rank.rank]?.parts ?? [];
      const fileOf = new Map<string, string>();
      for (const part of rankParts) for (const name of part.tensors) fileOf.set(name, part.file);
      const written = state.written[rank.rank] ?? [];
      return {
        rank: rank.rank,
        stage: rank.stage,
        tpRank: rank.tpRank,
        files: rankParts.map((part) => ({ path: part.file, bytes: part.fileBytes })),
        tensors: written.map((entry) =>
          manifestTensor({ ...entry, file: fileOf.get(entry.output.name) ?? '' }, layout.sources),
        ),
      };
    }),
  };
}

/** An earlier output with more ranks leaves their files behind; they would not match this manifest. */
async function removeOtherRanks(to: string, world: number): Promise<void> {
  try {
    for (const name of await readdir(to)) {
      const rank = RANK_PART_PATTERN.exec(name)?.[1];
      if (rank !== undefined && Number(rank) >= world) await rm(join(to, name), { force: true });
    }
  } catch (error) {
    throw asIoError(error, `removing earlier rank files from ${to}`);
  }
}

/** Config (with the FP8 quantisation it now has) and tokenizer files, as they are otherwise. */
async function copyFiles(
  model: ModelSource,
  to: string,
  configText: string,
  layout: PreshardLayoutPlan,
  signal: AbortSignal | undefined,
): Promise<string[]> {
  const copied: string[] = [];
  for (const file of model.files) {
    if (!COPIED_FILE.test(file.path)) continue;
    throwIfAborted(signal, 'copying config and tokenizer files');
    const bytes =
      file.path === CONFIG_FILE
        ? Buffer.from(outputConfig(configText, layout), 'utf8')
        : await readFileBytes(model, file.path, file.size, signal);
    await writeAtomically(join(to, file.path), bytes);
    copied.push(file.path);
  }
  return copied;
}

/**
 * config.json as the output needs it: unchanged, unless FP8 weights were written from a float
 * checkpoint, in which case it says so as vLLM's FP8 checkpoints do (dynamic activation scales; the
 * block size for block scales).
 */
export function outputConfig(configText: string, layout: PreshardLayoutPlan): string {
  const encodings = layout.ranks.flatMap((rank) => rank.tensors.map((tensor) => tensor.encoding));
  const fp8 = encodings.find((encoding) => encoding.kind === 'fp8');
  if (fp8 === undefined) return configText;
  const config = parseJson(configText, CONFIG_FILE) as Record<string, unknown>;
  config['quantization_config'] =
    fp8.scheme === 'block'
      ? { activation_scheme: 'dynamic', fmt: 'e4m3', quant_method: 'fp8', weight_block_size: [128, 128] }
      : { activation_scheme: 'dynamic', quant_method: 'fp8' };
  return JSON.stringify(config, null, 2) + '\n';
}

async function writeAtomically(path: string, bytes: Uint8Array): Promise<void> {
  const partial = `${path}.weightcast-partial`;
  try {
    await writeFile(partial, bytes);
    await rename(partial, path);
  } catch (error) {
    throw asIoError(error, `writing ${path}`);
  }
}

/** The weightcast manifest of everything in the output directory (rank files, config, pre-shard manifest). */
async function writeOutputManifest(to: string, signal: AbortSignal | undefined): Promise<string> {
  const origin = openOrigin(to);
  try {
    const manifest = await buildManifest(origin, signalOption(signal));
    const files = manifest.files.filter((file) => file.path !== OUTPUT_MANIFEST_NAME);
    return await writeManifest(join(to, OUTPUT_MANIFEST_NAME), { ...manifest, files });
  } finally {
    await origin.close();
  }
}
