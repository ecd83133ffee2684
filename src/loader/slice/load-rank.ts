/**
 * Slice-aware fetch: load one rank of a parallel layout, reading only the bytes its slices need.
 *
 * How data moves:
 *   1. Open the source (a directory, an HTTP origin, or the agent: source.ts) and the model: files,
 *      tensor index and piece digests from the model manifest, or from the origin's listing and
 *      safetensors headers without one.
 *   2. Read config.json (verified by its pieces with a manifest), build the plan (src/loader/plan) and
 *      take this rank's part. A plan manifest, when given, must describe exactly that plan.
 *   3. Read the rank's slices in phases (requests.ts: model order, the first layer alone first), each
 *      phase a ReadStream over one memory budget. Each slice arrives contiguous, is verified, and is
 *      written to the output (outputs.ts); then the config and tokenizer files are copied.
 *   4. Rename everything to its final name only when every byte is in and verified.
 *
 * Verification, end to end, one of three:
 *   - `plan-manifest`: only the slices' own bytes are read (exact ranges) and each slice's SHA-256 is
 *     checked against the plan manifest before it is written (PLAN_SLICE_HASH_MISMATCH otherwise).
 *     Config and tokenizer files are verified by their pieces when the model manifest is also given.
 *   - `pieces`: with the model manifest only, the whole pieces the slices touch are read and each is
 *     verified against the manifest before any slice is cut from it.
 *   - `none`: neither was given; headers are validated and the bytes are the origin's, trusted.
 */

import { WeightcastError, assert } from '../../errors.js';
import { INDEX_FILE_NAME } from '../../format/index-json.js';
import type { Manifest } from '../../manifest/manifest.js';
import type { OpenOriginOptions } from '../../origin/open.js';
import type { Origin } from '../../origin/origin.js';
import { buildParallelPlan } from '../plan/build.js';
import { CONFIG_FILE_NAME } from '../plan/files.js';
import { readPlanModel } from '../plan/model-config.js';
import { checkSliceBytes, type PlanManifest, type PlanManifestTensor } from '../plan/plan-manifest.js';
import type { ParallelismOptions, RankPlan } from '../plan/types.js';
import {
  closeModelSource,
  isSafetensorsPath,
  openModelSource,
  type ModelSource,
} from '../stream/model-source.js';
import { MEMORY_BYTES_DEFAULT, ReadStream } from '../stream/read-stream.js';
import type { ModelFile, ReadRequest, StreamStats } from '../stream/types.js';
import { createSliceOutput, type SliceFormat, type SliceOutput } from './outputs.js';
import {
  describeSliceTag,
  fileChunkRequests,
  firstLayerNames,
  slicePhases,
  type SliceTag,
} from './requests.js';
import { openSliceOrigin } from './source.js';
import { matchPlanManifest } from './verify.js';

const CONFIG_BYTES_MAX = 16 * 1024 * 1024;
const CHUNK_BYTES = 8 * 1024 * 1024;

export type SliceVerification = 'plan-manifest' | 'pieces' | 'none';

export type SliceLoadEvent =
  | { type: 'planned'; rank: RankPlan; phases: number; verification: SliceVerification }
  /** Every tensor of the rank's first layer is verified and written (not yet renamed). */
  | { type: 'first-layer'; seconds: number; tensors: number }
  | { type: 'progress'; bytesDelivered: number; bytesTotal: number };

export interface LoadRankOptions extends ParallelismOptions {
  rank: number;
  to: string;
  format: SliceFormat;
  /** The model manifest: piece digests, sizes and tensor index. Required with `agentUrl`. */
  manifest?: Manifest;
  planManifest?: PlanManifest;
  agentUrl?: string;
  token?: string;
  /** An origin already open (tests, benchmarks); `source` is then only used to join an agent. */
  origin?: Origin;
  originOptions?: OpenOriginOptions;
  memoryBytes?: number;
  concurrency?: number;
  hashThreads?: number;
  /** 'model' (default): first layer first, then layer by layer; 'single': one stream in file order. */
  order?: 'model' | 'single';
  /** sharded-state only: tensor bytes per part (default 5 GiB). */
  partBytesMax?: number;
  signal?: AbortSignal;
  /** Awaited: the load waits for it, so a test can look at the world at that moment. */
  onEvent?: (event: SliceLoadEvent) => void | Promise<void>;
}

export interface LoadRankResult {
  rank: number;
  stage: number;
  tpRank: number;
  format: SliceFormat;
  to: string;
  files: string[];
  tensors: number;
  verification: SliceVerification;
  /** Bytes of the rank's slices of split tensors, and of the tensors it holds whole. */
  sliceBytes: number;
  replicatedBytes: number;
  /** Tensor bytes read from the source (whole pieces when verifying pieces; retries included). */
  bytesFetched: number;
  /** bytesFetched / (sliceBytes + replicatedBytes). */
  fetchRatio: number | null;
  /** Bytes read for config, tokenizer and other files, not counted above. */
  otherBytesFetched: number;
  piecesVerified: number;
  slicesVerified: number;
  modelBytes: number;
  firstLayerSeconds: number | null;
  seconds: number;
  residentBytesPeak: number;
  memoryBytes: number;
}

export async function loadRank(source: string, options: LoadRankOptions): Promise<LoadRankResult> {
  const started = performance.now();
  const origin = options.origin ?? (await openSliceOrigin(source, sliceSourceOptions(options)));
  try {
    const model = await openModelSource(origin, {
      ...(options.manifest === undefined ? {} : { manifest: options.manifest }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    try {
      return await loadFromModel(model, options, started);
    } finally {
      await closeModelSource(model);
    }
  } finally {
    if (options.origin === undefined) await origin.close();
  }
}

function sliceSourceOptions(options: LoadRankOptions): Parameters<typeof openSliceOrigin>[1] {
  return {
    ...(options.manifest === undefined ? {} : { manifest: options.manifest }),
    ...(options.agentUrl === undefined ? {} : { agentUrl: options.agentUrl }),
    ...(options.token === undefined ? {} : { token: options.token }),
    ...(options.originOptions === undefined ? {} : { origin: options.originOptions }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  };
}

interface Counters {
  bytesFetched: number;
  otherBytesFetched: number;
  piecesVerified: number;
  residentBytesPeak: number;
}

async function loadFromModel(
  model: ModelSource,
  options: LoadRankOptions,
  started: number,
): Promise<LoadRankResult> {
  const counters: Counters = {
    bytesFetched: 0,
    otherBytesFetched: 0,
    piecesVerified: 0,
    residentBytesPeak: 0,
  };
  const memoryBytes = options.memoryBytes ?? MEMORY_BYTES_DEFAULT;
  const configBytes = await readConfig(model, options, counters);
  const plan = buildParallelPlan(
    {
      tensors: [...model.safetensors.values()].flatMap((index) => index.tensors),
      model: readPlanModel(parseJson(configBytes)),
    },
    options,
  );
  const rank = plan.ranks[options.rank];
  if (rank === undefined || !Number.isInteger(options.rank)) {
    throw new WeightcastError(
      'USAGE',
      `--rank must be from 0 to ${plan.ranks.length - 1}, got ${options.rank}`,
    );
  }
  const expected =
    options.planManifest === undefined
      ? undefined
      : matchPlanManifest(options.planManifest, plan, rank, model.files);
  const verification: SliceVerification =
    expected !== undefined ? 'plan-manifest' : model.verified ? 'pieces' : 'none';
  const phases = slicePhases(rank, {
    order: options.order ?? 'model',
    phaseBytesMin: Math.floor(memoryBytes / 4),
  });
  await options.onEvent?.({ type: 'planned', rank, phases: phases.length, verification });
  const copied = model.files.filter((f) => !isSafetensorsPath(f.path) && f.path !== INDEX_FILE_NAME);
  const output = await createSliceOutput({
    dir: options.to,
    format: options.format,
    plan,
    rank,
    copied,
    sourceHasIndex: model.files.some((f) => f.path === INDEX_FILE_NAME),
    ...(options.partBytesMax === undefined ? {} : { partBytesMax: options.partBytesMax }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
  let slicesVerified = 0;
  let firstLayerSeconds: number | null = null;
  let files: string[];
  try {
    // With a plan manifest the slices are checked by their own digests, so pieces are not needed.
    const sliceFiles: readonly ModelFile[] =
      expected === undefined ? model.files : model.files.map(({ path, size }) => ({ path, size }));
    // Nothing to verify by pieces: read the slices' own bytes and nothing between them.
    const exact = sliceFiles.every((file) => file.pieces === undefined);
    const firstLayerCount = firstLayerNames(rank).size;
    let firstLeft = firstLayerCount;
    let delivered = 0;
    const total = rank.totals.sourceBytes;
    for (const phase of phases) {
      await runStream(
        model,
        sliceFiles,
        phase,
        options,
        exact ? 'exact' : 'tensors',
        counters,
        async (tag, bytes) => {
          assert(tag.kind === 'slice', 'slice phases hold slices only');
          if (expected !== undefined) {
            checkSliceBytes(expected.get(tag.tensor.name) as PlanManifestTensor, bytes);
            slicesVerified++;
          }
          await output.writeTensor(tag.tensor, bytes);
          delivered += bytes.length;
          await options.onEvent?.({ type: 'progress', bytesDelivered: delivered, bytesTotal: total });
          if (tag.firstLayer && --firstLeft === 0) {
            firstLayerSeconds = (performance.now() - started) / 1000;
            await options.onEvent?.({
              type: 'first-layer',
              seconds: firstLayerSeconds,
              tensors: firstLayerCount,
            });
          }
        },
      );
    }
    await copyFiles(model, copied, configBytes, output, options, counters);
    files = await output.finish();
  } catch (error) {
    await output.abandon();
    throw error;
  }
  const rankBytes = rank.totals.sliceBytes + rank.totals.replicatedBytes;
  return {
    rank: rank.rank,
    stage: rank.stage,
    tpRank: rank.tpRank,
    format: options.format,
    to: options.to,
    files,
    tensors: rank.tensors.length,
    verification,
    sliceBytes: rank.totals.sliceBytes,
    replicatedBytes: rank.totals.replicatedBytes,
    bytesFetched: counters.bytesFetched,
    fetchRatio: rankBytes === 0 ? null : counters.bytesFetched / rankBytes,
    otherBytesFetched: counters.otherBytesFetched,
    piecesVerified: counters.piecesVerified,
    slicesVerified,
    modelBytes: plan.modelBytes,
    firstLayerSeconds,
    seconds: (performance.now() - started) / 1000,
    residentBytesPeak: counters.residentBytesPeak,
    memoryBytes,
  };
}

type Consume = (tag: SliceTag, bytes: Buffer) => Promise<void>;

/** One stream over `requests`; every delivered item goes to `consume` before the next is asked for. */
async function runStream(
  model: ModelSource,
  files: readonly ModelFile[],
  requests: ReadonlyArray<ReadRequest<SliceTag>>,
  options: LoadRankOptions,
  kind: 'tensors' | 'exact' | 'other',
  counters: Counters,
  consume: Consume,
): Promise<void> {
  const stream = new ReadStream(model.origin, files, requests, {
    ...(options.memoryBytes === undefined ? {} : { memoryBytes: options.memoryBytes }),
    ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
    ...(options.hashThreads === undefined ? {} : { hashThreads: options.hashThreads }),
    ...(model.pieceSize === undefined ? {} : { pieceSize: model.pieceSize }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
    exactReads: kind === 'exact',
    describe: describeSliceTag,
  });
  try {
    for await (const { request, bytes } of stream) await consume(request.tag, bytes);
  } finally {
    await stream.return();
    addStats(counters, stream.stats, kind === 'other');
  }
}

function addStats(counters: Counters, stats: StreamStats, other: boolean): void {
  if (other) counters.otherBytesFetched += stats.bytesRead;
  else counters.bytesFetched += stats.bytesRead;
  counters.piecesVerified += stats.piecesVerified;
  counters.residentBytesPeak = Math.max(counters.residentBytesPeak, stats.residentBytesPeak);
}

async function readConfig(model: ModelSource, options: LoadRankOptions, counters: Counters): Promise<Buffer> {
  const file = model.files.find((f) => f.path === CONFIG_FILE_NAME);
  if (file === undefined) {
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `the model has no ${CONFIG_FILE_NAME}: a plan needs it`,
    );
  }
  if (file.size > CONFIG_BYTES_MAX) {
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `${CONFIG_FILE_NAME} is larger than ${CONFIG_BYTES_MAX} bytes`,
      {
        file: file.path,
      },
    );
  }
  const bytes = Buffer.alloc(file.size);
  await runStream(
    model,
    model.files,
    fileChunkRequests([file], CHUNK_BYTES),
    options,
    'other',
    counters,
    (tag, chunk) => {
      assert(tag.kind === 'chunk', 'the config is read in chunks');
      chunk.copy(bytes, tag.start);
      return Promise.resolve();
    },
  );
  return bytes;
}

function parseJson(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8')) as unknown;
  } catch (error) {
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `${CONFIG_FILE_NAME} is not valid JSON`,
      {},
      { cause: error },
    );
  }
}

/** The config from memory, every other copied file through a stream (verified with a manifest). */
async function copyFiles(
  model: ModelSource,
  copied: ReadonlyArray<{ path: string; size: number }>,
  configBytes: Buffer,
  output: SliceOutput,
  options: LoadRankOptions,
  counters: Counters,
): Promise<void> {
  if (copied.some((f) => f.path === CONFIG_FILE_NAME))
    await output.writeFileBytes(CONFIG_FILE_NAME, 0, configBytes);
  const rest = copied.filter((f) => f.path !== CONFIG_FILE_NAME);
  if (rest.length === 0) return;
  await runStream(
    model,
    model.files,
    fileChunkRequests(rest, CHUNK_BYTES),
    options,
    'other',
    counters,
    (tag, bytes) => {
      assert(tag.kind === 'chunk', 'copied files are read in chunks');
      return output.writeFileBytes(tag.file, tag.start, bytes);
    },
  );
}
