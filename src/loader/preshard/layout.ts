/**
 * What every rank's pre-sharded files hold, pure: from a parallel plan (each rank's slices of the
 * source tensors) to output tensors, each built from one or more source slices and stored as is or
 * quantised to FP8.
 *
 * - `hf` keeps the checkpoint's names: one output per rank tensor, the plan's slice exactly.
 * - `vllm` fuses as vLLM's Llama/Qwen2 models hold their weights: the rank's q, k and v slices stacked
 *   along dim 0 into `qkv_proj` (biases too), gate then up into `gate_up_proj`; and embed_tokens and
 *   lm_head padded with zero rows to the rank's share of the padded vocabulary, as vLLM's
 *   VocabParallelEmbedding parameter is.
 * - `--quantize fp8` turns BF16/F16/F32 linear weights into F8_E4M3 plus a float32 scale: per tensor
 *   (`weight_scale`, one number for the whole source tensor, or for a fused tensor the largest of its
 *   parts', so every rank of a weight gets the same scale) for Llama/Qwen-style models, or per 128x128
 *   block of the rank's slice (`weight_scale_inv`) for DeepSeek-style ones. Already-FP8 weights and
 *   their scales are sliced, never requantised.
 */

import { WeightcastError } from '../../errors.js';
import { DTYPE_BITS, type Dtype } from '../../format/dtype.js';
import type { ParallelPlan, PlanModel, RankTensor, SourceTensor, TensorSlice } from '../plan/types.js';
import { FP8_BLOCK, isFloatSource } from './fp8.js';
import { FUSING_ARCHITECTURES, fusionTarget, isQuantisableName, scaleName } from './naming.js';

export const PRESHARD_LAYOUTS = ['hf', 'vllm'] as const;
export type PreshardLayout = (typeof PRESHARD_LAYOUTS)[number];
export const PRESHARD_QUANTISATIONS = ['none', 'fp8'] as const;
export type PreshardQuantisation = (typeof PRESHARD_QUANTISATIONS)[number];

export interface LayoutOptions {
  layout: PreshardLayout;
  quantize: PreshardQuantisation;
}

/** One source slice inside an output tensor, starting at output row `row` (dim 0). */
export interface OutputComponent {
  source: string;
  slice: TensorSlice | null;
  /** Shape of the slice (real rows only). */
  shape: number[];
  row: number;
}

export type OutputEncoding =
  | { kind: 'copy' }
  /** An FP8 weight; its scale tensor is `scale` (written with it). */
  | { kind: 'fp8'; scheme: 'per-tensor' | 'block'; scale: string }
  /** The scale of the FP8 weight `weight`. */
  | { kind: 'fp8-scale'; scheme: 'per-tensor' | 'block'; weight: string };

export interface OutputTensor {
  name: string;
  dtype: Dtype;
  shape: number[];
  bytes: number;
  /** The dtype of the source slices. */
  sourceDtype: Dtype;
  components: OutputComponent[];
  encoding: OutputEncoding;
  /** Rows of dim 0 past the components, zero-filled (vocabulary padding in the vllm layout). */
  padRows: number;
}

export interface RankOutput {
  rank: number;
  stage: number;
  tpRank: number;
  /** In the order of the plan's tensors, scale tensors right after their weights. */
  tensors: OutputTensor[];
}

export interface PreshardLayoutPlan {
  options: LayoutOptions;
  ranks: RankOutput[];
  /** Source tensors read together because some output stacks them (vllm fusion). */
  fusionGroups: string[][];
  /** Source tensors some rank needs, by name. */
  sources: Map<string, SourceTensor>;
}

export function planPreshardLayout(
  plan: ParallelPlan,
  model: PlanModel,
  sources: readonly SourceTensor[],
  options: LayoutOptions,
): PreshardLayoutPlan {
  if (options.layout === 'vllm' && !FUSING_ARCHITECTURES.includes(model.architecture)) {
    throw new WeightcastError(
      'PRESHARD_UNSUPPORTED',
      `--layout vllm fuses Llama/Qwen2-family modules; ${model.architecture} is not one (use --layout hf)`,
      { architecture: model.architecture },
    );
  }
  const byName = new Map(sources.map((tensor) => [tensor.name, tensor]));
  const used = new Map<string, SourceTensor>();
  const groups = new Map<string, string[]>();
  const ranks = plan.ranks.map((rank) => {
    for (const held of rank.tensors) used.set(held.name, sourceOf(byName, held.name));
    const tensors =
      options.layout === 'vllm' ? fusedOutputs(rank.tensors, groups) : rank.tensors.map(singleOutput);
    return {
      rank: rank.rank,
      stage: rank.stage,
      tpRank: rank.tpRank,
      tensors: withEncodings(tensors, model, options, byName),
    };
  });
  return { options, ranks, fusionGroups: [...groups.values()], sources: used };
}

function sourceOf(byName: ReadonlyMap<string, SourceTensor>, name: string): SourceTensor {
  const tensor = byName.get(name);
  if (tensor === undefined) throw new Error(`weightcast invariant broken: plan names unknown tensor ${name}`);
  return tensor;
}

function bytesOf(dtype: Dtype, shape: readonly number[]): number {
  return (shape.reduce((product, size) => product * size, 1) * DTYPE_BITS[dtype]) / 8;
}

function singleOutput(held: RankTensor): OutputTensor {
  return {
    name: held.name,
    dtype: held.dtype,
    shape: [...held.sliceShape],
    bytes: held.bytes,
    sourceDtype: held.dtype,
    components: [{ source: held.name, slice: held.slice, shape: [...held.sliceShape], row: 0 }],
    encoding: { kind: 'copy' },
    padRows: 0,
  };
}

/**
 * vllm layout: fusable parts gathered into their fused tensor (at the position of the first part the
 * plan lists), vocabulary tensors padded; the rest as in hf.
 */
function fusedOutputs(held: readonly RankTensor[], groups: Map<string, string[]>): OutputTensor[] {
  const outputs: OutputTensor[] = [];
  const fused = new Map<string, { output: OutputTensor; parts: Array<RankTensor | undefined> }>();
  for (const tensor of held) {
    const target = fusionTarget(tensor.name);
    if (target === undefined) {
      outputs.push(paddedOutput(tensor));
      continue;
    }
    let entry = fused.get(target.name);
    if (entry === undefined) {
      const output: OutputTensor = { ...singleOutput(tensor), name: target.name, components: [] };
      entry = { output, parts: new Array<RankTensor | undefined>(target.parts).fill(undefined) };
      fused.set(target.name, entry);
      outputs.push(output);
    }
    entry.parts[target.index] = tensor;
  }
  for (const [name, { output, parts }] of fused) {
    stackParts(name, output, parts);
    const sourceNames = output.components.map((component) => component.source);
    const known = groups.get(name);
    if (known === undefined) groups.set(name, sourceNames);
  }
  return outputs;
}

function stackParts(name: string, output: OutputTensor, parts: ReadonlyArray<RankTensor | undefined>): void {
  let row = 0;
  let bytes = 0;
  for (const part of parts) {
    if (part === undefined) {
      throw new WeightcastError(
        'PRESHARD_UNSUPPORTED',
        `cannot fuse ${name}: the checkpoint lacks one of its parts`,
        { tensor: name },
      );
    }
    if (part.dtype !== output.sourceDtype || (part.slice !== null && part.slice.dim !== 0)) {
      throw new WeightcastError(
        'PRESHARD_UNSUPPORTED',
        `cannot fuse ${name}: ${part.name} is ${part.dtype}${part.slice === null ? '' : ` sliced on dim ${part.slice.dim}`}, its other parts ${output.sourceDtype} on dim 0`,
        { tensor: name },
      );
    }
    if (!isFloatSource(part.dtype)) {
      throw new WeightcastError(
        'PRESHARD_UNSUPPORTED',
        `cannot fuse ${name}: ${part.name} is ${part.dtype}; fusing already-quantised parts would need their scales merged (use --layout hf)`,
        { tensor: name },
      );
    }
    const rest = part.sliceShape.slice(1);
    const expected = output.components[0]?.shape.slice(1) ?? rest;
    if (rest.join(',') !== expected.join(',')) {
      throw new WeightcastError('PRESHARD_UNSUPPORTED', `cannot fuse ${name}: parts differ past dim 0`, {
        tensor: name,
      });
    }
    output.components.push({ source: part.name, slice: part.slice, shape: [...part.sliceShape], row });
    row += part.sliceShape[0] ?? 1;
    bytes += part.bytes;
  }
  output.shape = [row, ...(output.components[0]?.shape.slice(1) ?? [])];
  output.bytes = bytes;
}

function paddedOutput(held: RankTensor): OutputTensor {
  const output = singleOutput(held);
  const padded = held.slice?.padded;
  if (padded === undefined || held.slice === null || padded === held.slice.length) return output;
  const shape = [padded, ...held.sliceShape.slice(1)];
  return { ...output, shape, bytes: bytesOf(held.dtype, shape), padRows: padded - held.slice.length };
}

/** Applies --quantize: FP8 weights followed by their scale tensors. */
function withEncodings(
  outputs: readonly OutputTensor[],
  model: PlanModel,
  options: LayoutOptions,
  byName: ReadonlyMap<string, SourceTensor>,
): OutputTensor[] {
  if (options.quantize === 'none') return [...outputs];
  const scheme = model.architecture.startsWith('deepseek') ? 'block' : 'per-tensor';
  const result: OutputTensor[] = [];
  for (const output of outputs) {
    if (!quantises(output, byName)) {
      result.push(output);
      continue;
    }
    const scale = scaleName(output.name, scheme);
    if (byName.has(scale)) {
      throw new WeightcastError(
        'PRESHARD_UNSUPPORTED',
        `${output.name} is not quantised yet the checkpoint already has ${scale}`,
        { tensor: scale },
      );
    }
    const [rows = 1, columns = 1] = output.shape;
    result.push({
      ...output,
      dtype: 'F8_E4M3',
      bytes: rows * columns,
      encoding: { kind: 'fp8', scheme, scale },
    });
    const scaleShape =
      scheme === 'per-tensor' ? [] : [Math.ceil(rows / FP8_BLOCK), Math.ceil(columns / FP8_BLOCK)];
    result.push({
      ...output,
      name: scale,
      dtype: 'F32',
      shape: scaleShape,
      bytes: bytesOf('F32', scaleShape),
      encoding: { kind: 'fp8-scale', scheme, weight: output.name },
    });
  }
  return result;
}

function quantises(output: OutputTensor, byName: ReadonlyMap<string, SourceTensor>): boolean {
  if (output.shape.length !== 2 || output.padRows !== 0 || !isFloatSource(output.sourceDtype)) return false;
  return output.components.every((component) => {
    const source = byName.get(component.source);
    return source !== undefined && isQuantisableName(component.source) && source.shape.length === 2;
  });
}
