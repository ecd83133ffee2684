/**
 * The vocabulary of parallelism plans: what goes in (a model's tensor index and the config values that
 * decide how it splits, plus the parallel layout asked for) and what comes out (for every rank, each
 * tensor it holds, whole or as a slice, and the byte ranges of the source file that slice needs).
 */

import type { Dtype } from '../../format/dtype.js';

/** One tensor of the source checkpoint, as a safetensors header or a manifest describes it. */
export interface SourceTensor {
  name: string;
  /** The shard holding it, relative to the model directory. */
  file: string;
  dtype: Dtype;
  shape: number[];
  /** Absolute byte range in the file, end exclusive. */
  start: number;
  end: number;
}

export const PLAN_ARCHITECTURES = [
  'llama',
  'mistral',
  'qwen2',
  'qwen3',
  'qwen2_moe',
  'qwen3_moe',
  'deepseek_v2',
  'deepseek_v3',
] as const;
export type PlanArchitecture = (typeof PLAN_ARCHITECTURES)[number];

/** Multi-head latent attention (DeepSeek): per-head widths of the projections that split by head. */
export interface LatentAttention {
  qkNopeHeadDim: number;
  qkRopeHeadDim: number;
  vHeadDim: number;
  /** Null when queries are projected directly (`q_proj`) instead of through `q_a_proj`/`q_b_proj`. */
  qLoraRank: number | null;
  kvLoraRank: number;
}

/** The config.json values a plan needs, read and checked once. */
export interface PlanModel {
  architecture: PlanArchitecture;
  hiddenSize: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocabSize: number;
  /** Routed experts per MoE layer; 0 for dense models. */
  experts: number;
  latentAttention: LatentAttention | null;
  /** FP8 `weight_block_size` [rows, columns] when weights carry `weight_scale_inv` block scales. */
  blockSize: [number, number] | null;
  tieWordEmbeddings: boolean;
}

export interface ParallelismOptions {
  /** Tensor-parallel ranks per pipeline stage. */
  tp: number;
  /** Pipeline stages (default 1). */
  pp?: number;
  /** Expert-parallel groups per stage (default 1: experts are tensor-parallel like the rest). */
  ep?: number;
  /** Relative size of each tensor-parallel rank (length tp); absent means an even split. */
  weights?: number[];
  /** Tensors no rule covers: fail (default), or replicate them on every rank with a warning. */
  unknownTensors?: 'error' | 'replicate';
}

/** The part of a tensor a rank holds along one dimension. */
export interface TensorSlice {
  dim: 0 | 1;
  start: number;
  length: number;
  /**
   * Vocabulary-parallel tensors only: the rank's share of the padded vocabulary. Rows past `length`
   * are padding the rank fills with zeros; the last rank may hold fewer real rows, or none.
   */
  padded?: number;
}

/**
 * `count` byte ranges of `length` bytes, the first at `offset` (absolute, in the tensor's file) and each
 * `stride` bytes after the previous one. A contiguous range has count 1 and stride equal to length.
 */
export interface ByteRun {
  offset: number;
  length: number;
  stride: number;
  count: number;
}

export interface RankTensor {
  name: string;
  file: string;
  dtype: Dtype;
  /** The source tensor's shape. */
  shape: number[];
  /** Null when the rank holds the whole tensor. */
  slice: TensorSlice | null;
  /** The shape of what the rank holds (real rows only; vocabulary padding excluded). */
  sliceShape: number[];
  bytes: number;
  /** Where those bytes are in the source file, in the slice's row-major order. */
  ranges: ByteRun[];
}

export interface RankTotals {
  tensors: number;
  slicedTensors: number;
  replicatedTensors: number;
  /** Bytes of the tensors this rank holds a slice of (its slices only). */
  sliceBytes: number;
  /** Bytes of the tensors this rank holds whole. */
  replicatedBytes: number;
  /** Bytes of the source files the ranges cover. */
  sourceBytes: number;
  /** Separate byte ranges to read, counted per tensor after coalescing. */
  rangeCount: number;
}

export interface RankPlan {
  rank: number;
  stage: number;
  /** This rank's index in its stage's tensor-parallel group. */
  tpRank: number;
  /** The expert-parallel group this rank belongs to, and its rank inside that group. */
  expertGroup: number;
  expertRank: number;
  /** Decoder layers of this rank's stage: [start, end). */
  layers: [number, number];
  /** Routed experts this rank holds (whole or sliced): [start, end). Empty for dense models. */
  experts: [number, number];
  tensors: RankTensor[];
  totals: RankTotals;
}

export interface ParallelPlan {
  architecture: PlanArchitecture;
  tp: number;
  pp: number;
  ep: number;
  /** Ranks per pipeline stage: max(tp, ep). */
  ranksPerStage: number;
  weights: number[] | null;
  vocab: { size: number; padded: number };
  ranks: RankPlan[];
  /** Tensors no rank loads (multi-token-prediction layers past num_hidden_layers). */
  skipped: string[];
  /** Tensors replicated because no rule covered them (only with unknownTensors: 'replicate'). */
  warnings: string[];
  modelBytes: number;
}
