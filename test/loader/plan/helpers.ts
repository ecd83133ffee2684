/**
 * Test helpers for parallelism plans: tiny models with any architecture's names and config (for what
 * the synthesiser does not make: Qwen3, Mistral, GQA with few KV heads, aligned FP8 blocks), a reference
 * slicer that cuts a tensor element by element (independent of the plan's byte-range arithmetic), and a
 * check that every rank's byte ranges, read from the files, give exactly the reference slice.
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { DTYPE_BITS, type Dtype } from '../../../src/format/dtype.js';
import { parseSafetensorsBuffer } from '../../../src/format/safetensors.js';
import {
  SafetensorsFileWriter,
  planSafetensorsLayout,
  type TensorSpec,
} from '../../../src/format/safetensors-writer.js';
import { expandRuns } from '../../../src/loader/plan/byte-ranges.js';
import { hashPlanSlices, readModelDirectory, readRankTensor } from '../../../src/loader/plan/files.js';
import { sliceKey } from '../../../src/loader/plan/plan-manifest.js';
import type { ParallelPlan, TensorSlice } from '../../../src/loader/plan/types.js';
import { deterministicBytes } from '../../helpers/fixtures.js';

export interface TinyModel {
  config: Record<string, unknown>;
  tensors: TensorSpec[];
}

/** Writes config.json, two shards (tensors alternate between them) and the index. */
export async function writeTinyModel(dir: string, model: TinyModel, seed = 'tiny'): Promise<void> {
  await mkdir(dir, { recursive: true });
  const shards: TensorSpec[][] = [[], []];
  model.tensors.forEach((tensor, index) => shards[index % 2]?.push(tensor));
  const weightMap: Record<string, string> = {};
  for (const [index, specs] of shards.entries()) {
    const file = `model-0000${index + 1}-of-00002.safetensors`;
    const layout = planSafetensorsLayout(specs);
    const writer = await SafetensorsFileWriter.create(join(dir, file), layout);
    await writer.write(deterministicBytes(`${seed}:${index}`, layout.fileSize - layout.header.length));
    await writer.close();
    for (const spec of specs) weightMap[spec.name] = file;
  }
  await writeFile(
    join(dir, 'model.safetensors.index.json'),
    JSON.stringify({ metadata: {}, weight_map: weightMap }),
  );
  await writeFile(join(dir, 'config.json'), JSON.stringify(model.config));
}

export interface LlamaLikeOptions {
  modelType: 'llama' | 'mistral' | 'qwen2' | 'qwen3';
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
  vocab: number;
  bias?: boolean;
  qkNorm?: boolean;
  tie?: boolean;
  /** Block-quantised FP8 linear layers with 128x128 weight_scale_inv. */
  fp8Block?: boolean;
  extra?: TensorSpec[];
}

function linear(tensors: TensorSpec[], name: string, out: number, input: number, fp8: boolean): void {
  tensors.push({ name: `${name}.weight`, dtype: fp8 ? 'F8_E4M3' : 'BF16', shape: [out, input] });
  if (fp8)
    tensors.push({
      name: `${name}.weight_scale_inv`,
      dtype: 'F32',
      shape: [Math.ceil(out / 128), Math.ceil(input / 128)],
    });
}

export function llamaLike(options: LlamaLikeOptions): TinyModel {
  const { layers, hidden, heads, kvHeads, headDim, intermediate, vocab } = options;
  const fp8 = options.fp8Block === true;
  const tensors: TensorSpec[] = [
    { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [vocab, hidden] },
  ];
  for (let layer = 0; layer < layers; layer++) {
    const p = `model.layers.${layer}`;
    for (const [proj, width] of [
      ['q_proj', heads * headDim],
      ['k_proj', kvHeads * headDim],
      ['v_proj', kvHeads * headDim],
    ] as const) {
      linear(tensors, `${p}.self_attn.${proj}`, width, hidden, fp8);
      if (options.bias === true)
        tensors.push({ name: `${p}.self_attn.${proj}.bias`, dtype: 'BF16', shape: [width] });
    }
    linear(tensors, `${p}.self_attn.o_proj`, hidden, heads * headDim, fp8);
    if (options.qkNorm === true) {
      tensors.push({ name: `${p}.self_attn.q_norm.weight`, dtype: 'BF16', shape: [headDim] });
      tensors.push({ name: `${p}.self_attn.k_norm.weight`, dtype: 'BF16', shape: [headDim] });
    }
    linear(tensors, `${p}.mlp.gate_proj`, intermediate, hidden, fp8);
    linear(tensors, `${p}.mlp.up_proj`, intermediate, hidden, fp8);
    linear(tensors, `${p}.mlp.down_proj`, hidden, intermediate, fp8);
    tensors.push({ name: `${p}.input_layernorm.weight`, dtype: 'BF16', shape: [hidden] });
    tensors.push({ name: `${p}.post_attention_layernorm.weight`, dtype: 'BF16', shape: [hidden] });
  }
  tensors.push({ name: 'model.norm.weight', dtype: 'BF16', shape: [hidden] });
  if (options.tie !== true) tensors.push({ name: 'lm_head.weight', dtype: 'BF16', shape: [vocab, hidden] });
  tensors.push(...(options.extra ?? []));
  const config: Record<string, unknown> = {
    model_type: options.modelType,
    hidden_size: hidden,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    head_dim: headDim,
    intermediate_size: intermediate,
    vocab_size: vocab,
    tie_word_embeddings: options.tie === true,
  };
  if (fp8) config['quantization_config'] = { quant_method: 'fp8', weight_block_size: [128, 128] };
  return { config, tensors };
}

export interface DeepseekLikeOptions {
  layers: number;
  firstDense: number;
  hidden: number;
  heads: number;
  nope: number;
  rope: number;
  v: number;
  qLora: number;
  kvLora: number;
  intermediate: number;
  moeIntermediate: number;
  experts: number;
  vocab: number;
  fp8Block: boolean;
  /** Adds a multi-token-prediction layer past num_hidden_layers, as the real checkpoint has. */
  mtpLayer?: boolean;
}

export function deepseekLike(o: DeepseekLikeOptions): TinyModel {
  const fp8 = o.fp8Block;
  const tensors: TensorSpec[] = [
    { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [o.vocab, o.hidden] },
  ];
  const mlp = (prefix: string, width: number): void => {
    linear(tensors, `${prefix}.gate_proj`, width, o.hidden, fp8);
    linear(tensors, `${prefix}.up_proj`, width, o.hidden, fp8);
    linear(tensors, `${prefix}.down_proj`, o.hidden, width, fp8);
  };
  for (let layer = 0; layer < o.layers + (o.mtpLayer === true ? 1 : 0); layer++) {
    const p = `model.layers.${layer}`;
    linear(tensors, `${p}.self_attn.q_a_proj`, o.qLora, o.hidden, fp8);
    tensors.push({ name: `${p}.self_attn.q_a_layernorm.weight`, dtype: 'BF16', shape: [o.qLora] });
    linear(tensors, `${p}.self_attn.q_b_proj`, o.heads * (o.nope + o.rope), o.qLora, fp8);
    linear(tensors, `${p}.self_attn.kv_a_proj_with_mqa`, o.kvLora + o.rope, o.hidden, fp8);
    tensors.push({ name: `${p}.self_attn.kv_a_layernorm.weight`, dtype: 'BF16', shape: [o.kvLora] });
    linear(tensors, `${p}.self_attn.kv_b_proj`, o.heads * (o.nope + o.v), o.kvLora, fp8);
    linear(tensors, `${p}.self_attn.o_proj`, o.hidden, o.heads * o.v, fp8);
    if (layer < o.firstDense) {
      mlp(`${p}.mlp`, o.intermediate);
    } else {
      for (let expert = 0; expert < o.experts; expert++) mlp(`${p}.mlp.experts.${expert}`, o.moeIntermediate);
      tensors.push({ name: `${p}.mlp.gate.weight`, dtype: 'BF16', shape: [o.experts, o.hidden] });
      tensors.push({ name: `${p}.mlp.gate.e_score_correction_bias`, dtype: 'F32', shape: [o.experts] });
      mlp(`${p}.mlp.shared_experts`, o.moeIntermediate);
    }
    tensors.push({ name: `${p}.input_layernorm.weight`, dtype: 'BF16', shape: [o.hidden] });
    tensors.push({ name: `${p}.post_attention_layernorm.weight`, dtype: 'BF16', shape: [o.hidden] });
  }
  tensors.push({ name: 'model.norm.weight', dtype: 'BF16', shape: [o.hidden] });
  tensors.push({ name: 'lm_head.weight', dtype: 'BF16', shape: [o.vocab, o.hidden] });
  const config: Record<string, unknown> = {
    model_type: 'deepseek_v3',
    hidden_size: o.hidden,
    num_hidden_layers: o.layers,
    num_attention_heads: o.heads,
    num_key_value_heads: o.heads,
    qk_nope_head_dim: o.nope,
    qk_rope_head_dim: o.rope,
    v_head_dim: o.v,
    q_lora_rank: o.qLora,
    kv_lora_rank: o.kvLora,
    intermediate_size: o.intermediate,
    moe_intermediate_size: o.moeIntermediate,
    n_routed_experts: o.experts,
    first_k_dense_replace: o.firstDense,
    vocab_size: o.vocab,
  };
  if (fp8) config['quantization_config'] = { quant_method: 'fp8', weight_block_size: [128, 128] };
  return { config, tensors };
}

export interface LoadedTensor {
  dtype: Dtype;
  shape: number[];
  bytes: Buffer;
}

/** Every tensor of a model directory, read whole into memory (test models are small). */
export async function loadAllTensors(
  dir: string,
): Promise<{ tensors: Map<string, LoadedTensor>; files: Map<string, Buffer> }> {
  const source = await readModelDirectory(dir);
  const files = new Map<string, Buffer>();
  const tensors = new Map<string, LoadedTensor>();
  for (const { path } of source.files) {
    const buffer = await readFile(join(dir, path));
    files.set(path, buffer);
    for (const entry of parseSafetensorsBuffer(buffer, path).tensors) {
      tensors.set(entry.name, {
        dtype: entry.dtype,
        shape: entry.shape,
        bytes: buffer.subarray(entry.start, entry.end),
      });
    }
  }
  return { tensors, files };
}

/**
 * The reference: `tensor.narrow(dim, start, length).contiguous()`, computed over the slice's
 * multi-index (every index of all dims but the last, then a run along the last), with no knowledge of
 * the plan's rows, strides or runs.
 */
export function referenceSlice(tensor: LoadedTensor, slice: TensorSlice | null): Buffer {
  if (slice === null) return Buffer.from(tensor.bytes);
  const width = DTYPE_BITS[tensor.dtype] / 8;
  const shape = tensor.shape;
  const last = shape.length - 1;
  const outShape = shape.map((size, dim) => (dim === slice.dim ? slice.length : size));
  const strides = shape.map((_, dim) => shape.slice(dim + 1).reduce((a, b) => a * b, 1));
  const runLength = outShape[last] ?? 1;
  const runs = outShape.slice(0, last).reduce((a, b) => a * b, 1);
  const out = Buffer.alloc(runs * runLength * width);
  const index = new Array<number>(Math.max(0, last)).fill(0);
  for (let run = 0; run < runs; run++) {
    let source = slice.dim === last ? slice.start : 0;
    for (let dim = 0; dim < last; dim++) {
      source += ((index[dim] ?? 0) + (dim === slice.dim ? slice.start : 0)) * (strides[dim] ?? 1);
    }
    tensor.bytes.copy(out, run * runLength * width, source * width, (source + runLength) * width);
    for (let dim = last - 1; dim >= 0; dim--) {
      index[dim] = (index[dim] ?? 0) + 1;
      if ((index[dim] ?? 0) < (outShape[dim] ?? 0)) break;
      index[dim] = 0;
    }
  }
  return out;
}

export interface CheckOptions {
  /** Also read through readRankTensor (the disk) for this many tensors per rank. */
  diskReadsPerRank?: number;
  /** Hash the plan and compare every slice digest with the reference bytes' SHA-256. */
  hash?: boolean;
}

/**
 * For every rank and tensor: the byte ranges, read from the files in memory, equal the reference slice;
 * optionally the same through the disk, and the plan's slice digests equal the reference's SHA-256.
 */
export async function checkPlanBytes(
  dir: string,
  plan: ParallelPlan,
  options: CheckOptions = {},
): Promise<void> {
  const { tensors, files } = await loadAllTensors(dir);
  const digests =
    options.hash === true
      ? await hashPlanSlices(await readModelDirectory(dir), plan, { chunkBytes: 777 })
      : null;
  for (const rank of plan.ranks) {
    let diskReads = options.diskReadsPerRank ?? 0;
    for (const held of rank.tensors) {
      const full = tensors.get(held.name);
      assert.ok(full, `rank ${rank.rank}: ${held.name} is not in the model`);
      const reference = referenceSlice(full, held.slice);
      const file = files.get(held.file);
      assert.ok(file);
      const fromRanges = Buffer.concat(
        [...expandRuns(held.ranges)].map(([start, end]) => file.subarray(start, end)),
      );
      assert.equal(held.bytes, reference.length, `rank ${rank.rank}: ${held.name} byte count`);
      assert.ok(
        fromRanges.equals(reference),
        `rank ${rank.rank}: ${held.name} ${JSON.stringify(held.slice)} bytes differ`,
      );
      if (diskReads-- > 0)
        assert.ok((await readRankTensor(dir, held)).equals(reference), `${held.name} read from disk`);
      if (digests !== null) {
        const expected = createHash('sha256').update(reference).digest('hex');
        assert.equal(
          digests.get(sliceKey(held.name, held.slice)),
          expected,
          `digest of ${held.name} on rank ${rank.rank}`,
        );
      }
    }
  }
}

/**
 * Within every stage (and, for experts, every expert group), the distinct slices of each tensor tile
 * it exactly: no gaps, no partial overlaps (identical replicas, like shared KV heads, count once). A
 * vocabulary tensor's real rows tile [0, vocab). Every tensor of the model not skipped is held somewhere.
 */
export function checkPlanTiles(plan: ParallelPlan, modelTensors: Iterable<string>): void {
  const seen = new Set<string>();
  for (let stage = 0; stage < plan.pp; stage++) {
    const slices = new Map<string, { size: number; spans: Set<string> }>();
    for (const rank of plan.ranks.filter((candidate) => candidate.stage === stage)) {
      for (const held of rank.tensors) {
        seen.add(held.name);
        if (held.slice === null) continue;
        const entry = slices.get(held.name) ?? {
          size: held.shape[held.slice.dim] ?? 0,
          spans: new Set<string>(),
        };
        entry.spans.add(`${held.slice.start}:${held.slice.length}`);
        slices.set(held.name, entry);
      }
    }
    for (const [name, { size, spans }] of slices) {
      const sorted = [...spans]
        .map((text) => text.split(':').map(Number) as [number, number])
        .sort((a, b) => a[0] - b[0]);
      let next = 0;
      for (const [start, length] of sorted) {
        if (length === 0) continue;
        assert.equal(start, next, `stage ${stage}: ${name} slices leave a gap or overlap at ${next}`);
        next = start + length;
      }
      assert.equal(next, size, `stage ${stage}: ${name} slices cover ${next} of ${size}`);
    }
  }
  for (const name of modelTensors) {
    if (!plan.skipped.includes(name)) assert.ok(seen.has(name), `${name} is on no rank`);
  }
}
