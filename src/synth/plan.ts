/**
 * Turns synth options into a complete plan of what to write: validated options, dimensions (chosen by
 * size or given), config, tensors, their split into shards, and the small text files. Pure, so that
 * everything about a synthetic model except its bytes can be checked without touching a disk.
 */

import { assert, isWeightcastError } from '../errors.js';
import { elementCount } from '../format/dtype.js';
import { INDEX_FILE_NAME, serializeIndexJson } from '../format/index-json.js';
import {
  FP8_SPLIT_RANKS_MAX,
  SYNTH_ARCHS,
  SYNTH_DTYPES,
  deriveDims,
  invalidOptions,
  maxPositionEmbeddings,
  modelConfig,
  modelTensors,
  tensorByteSize,
  type DimChoices,
  type ModelDims,
  type SynthArch,
  type SynthDtype,
  type SynthTensor,
} from './architectures.js';
import { assignShards, defaultShardCount, shardFileName } from './sharding.js';
import { chooseDims } from './sizing.js';
import { tokenizerFiles, type TextFile } from './tokenizer.js';

export interface SynthOptions {
  arch?: SynthArch;
  dtype?: SynthDtype;
  seed?: number;
  /** Target total tensor bytes; dimensions not given explicitly are chosen to land near it. */
  sizeBytes?: number;
  hidden?: number;
  layers?: number;
  experts?: number;
  heads?: number;
  vocab?: number;
  /** Number of shard files; by default as many as keep each near SHARD_BYTES_TARGET. */
  shards?: number;
}

export const SIZE_BYTES_DEFAULT = 64 * 1024 * 1024;
/** Used when some dimensions are given but no size: a small model, not a guess at a large one. */
const HIDDEN_DEFAULT = 512;
const LAYERS_DEFAULT = 4;

export interface ShardPlan {
  file: string;
  /** In model order; the writer lays them out widest dtype first. */
  tensors: SynthTensor[];
  tensorBytes: number;
}

export interface SynthPlan {
  arch: SynthArch;
  dtype: SynthDtype;
  seed: number;
  dims: ModelDims;
  config: Record<string, unknown>;
  shards: ShardPlan[];
  /** config.json, model.safetensors.index.json, tokenizer and generation files. */
  textFiles: TextFile[];
  tensorCount: number;
  tensorBytes: number;
  parameterCount: number;
}

export function parseArch(text: string): SynthArch {
  const arch = SYNTH_ARCHS.find((name) => name === text);
  if (arch === undefined) {
    throw invalidOptions(`unknown arch ${JSON.stringify(text)}; expected one of ${SYNTH_ARCHS.join(', ')}`);
  }
  return arch;
}

export function parseDtype(text: string): SynthDtype {
  const dtype = SYNTH_DTYPES.find((name) => name === text);
  if (dtype === undefined) {
    throw invalidOptions(`unknown dtype ${JSON.stringify(text)}; expected one of ${SYNTH_DTYPES.join(', ')}`);
  }
  return dtype;
}

export function planSynth(options: SynthOptions): SynthPlan {
  // Checked again at run time: JavaScript callers and the CLI may pass any string.
  const arch = parseArch(options.arch ?? 'llama');
  const dtype = parseDtype(options.dtype ?? 'bf16');
  const seed = options.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) {
    throw invalidOptions(`seed must be a non-negative integer, got ${seed}`);
  }
  const dims = resolveDims(arch, dtype, options);
  const tensors = modelTensors(dims, dtype);
  const sizes = tensors.map(tensorByteSize);
  const tensorBytes = sizes.reduce((sum, bytes) => sum + bytes, 0);
  const shardCount = options.shards ?? defaultShardCount(tensorBytes);
  const shards = splitShards(tensors, sizes, assignShards(sizes, shardCount), shardCount);
  const config = modelConfig(dims, dtype);
  const textFiles = [
    { name: 'config.json', text: JSON.stringify(config, null, 2) + '\n' },
    { name: INDEX_FILE_NAME, text: indexText(shards, tensorBytes) },
    ...tokenizerFiles(arch, maxPositionEmbeddings(arch)),
  ];
  const parameterCount = tensors.reduce((sum, tensor) => sum + Number(elementCount(tensor.shape)), 0);
  return {
    arch,
    dtype,
    seed,
    dims,
    config,
    shards,
    textFiles,
    tensorCount: tensors.length,
    tensorBytes,
    parameterCount,
  };
}

function resolveDims(arch: SynthArch, dtype: SynthDtype, options: SynthOptions): ModelDims {
  const fixed: Partial<DimChoices> = {};
  if (options.hidden !== undefined) fixed.hidden = options.hidden;
  if (options.layers !== undefined) fixed.layers = options.layers;
  if (options.experts !== undefined) fixed.experts = options.experts;
  if (options.heads !== undefined) fixed.heads = options.heads;
  if (options.vocab !== undefined) fixed.vocab = options.vocab;
  if (arch === 'llama' && fixed.experts !== undefined) {
    throw invalidOptions('llama is a dense model: it takes no experts');
  }
  const shapeGiven = fixed.hidden !== undefined || fixed.layers !== undefined || fixed.experts !== undefined;
  if (options.sizeBytes !== undefined) {
    return chooseDims({ arch, dtype, targetBytes: options.sizeBytes, fixed });
  }
  if (!shapeGiven) return chooseDefaultSize(arch, dtype, fixed);
  // No size to stay near: block-quantised widths split over as many ranks as sizing ever aims for.
  const split = arch === 'deepseek-v3' && dtype === 'f8_e4m3' ? { fp8SplitRanks: FP8_SPLIT_RANKS_MAX } : {};
  return deriveDims(arch, { hidden: HIDDEN_DEFAULT, layers: LAYERS_DEFAULT, ...split, ...fixed });
}

/** Heads or vocab alone are sized to the default; a refusal says that size was not the user's. */
function chooseDefaultSize(arch: SynthArch, dtype: SynthDtype, fixed: Partial<DimChoices>): ModelDims {
  try {
    return chooseDims({ arch, dtype, targetBytes: SIZE_BYTES_DEFAULT, fixed });
  } catch (error) {
    if (!isWeightcastError(error, 'SYNTH_INVALID_OPTIONS')) throw error;
    throw invalidOptions(
      `${error.message} (no size was given: ${SIZE_BYTES_DEFAULT / 1024 / 1024} MiB is the default)`,
    );
  }
}

function splitShards(
  tensors: readonly SynthTensor[],
  sizes: readonly number[],
  assignment: readonly number[],
  shardCount: number,
): ShardPlan[] {
  const shards: ShardPlan[] = Array.from({ length: shardCount }, (_, index) => ({
    file: shardFileName(index, shardCount),
    tensors: [],
    tensorBytes: 0,
  }));
  tensors.forEach((tensor, index) => {
    const shard = shards[assignment[index] ?? -1];
    assert(shard !== undefined, `tensor ${tensor.name} was assigned to no shard`);
    shard.tensors.push(tensor);
    shard.tensorBytes += sizes[index] ?? 0;
  });
  return shards;
}

function indexText(shards: readonly ShardPlan[], tensorBytes: number): string {
  const weightMap = new Map<string, string>();
  for (const shard of shards) for (const tensor of shard.tensors) weightMap.set(tensor.name, shard.file);
  return serializeIndexJson({ metadata: { total_size: tensorBytes }, weightMap });
}
