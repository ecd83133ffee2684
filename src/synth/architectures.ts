/**
 * What a synthetic model is: for each supported architecture, how a few free choices (hidden size,
 * layers, experts, heads, vocab) expand into the full set of dimensions, the Hugging Face `config.json`
 * with the real field names, and the tensors (real names, shapes consistent with the config) in model
 * order. Pure: sizing.ts searches over these functions and synth.ts writes what they describe.
 */

import { WeightcastError } from '../errors.js';
import { DTYPE_BITS } from '../format/dtype.js';
import type { TensorSpec } from '../format/safetensors-writer.js';
import { TRANSFORMERS_VERSION, VOCAB_MIN, specialTokenIds } from './tokenizer.js';
import type { ValueDtype, ValueRole } from './values.js';

export const SYNTH_ARCHS = ['llama', 'qwen2-moe', 'deepseek-v3'] as const;
export type SynthArch = (typeof SYNTH_ARCHS)[number];
export const SYNTH_DTYPES = ['bf16', 'f16', 'f32', 'f8_e4m3'] as const;
export type SynthDtype = (typeof SYNTH_DTYPES)[number];

interface BaseDims {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  /** Dense MLP width (for Qwen2-MoE the config's intermediate_size, equal to the shared expert's). */
  intermediate: number;
  vocab: number;
}

export interface LlamaDims extends BaseDims {
  arch: 'llama';
  headDim: number;
}

export interface Qwen2MoeDims extends BaseDims {
  arch: 'qwen2-moe';
  headDim: number;
  experts: number;
  expertsPerToken: number;
  moeIntermediate: number;
  sharedIntermediate: number;
}

export interface DeepseekV3Dims extends BaseDims {
  arch: 'deepseek-v3';
  experts: number;
  expertsPerToken: number;
  sharedExperts: number;
  moeIntermediate: number;
  firstDenseLayers: number;
  qLoraRank: number;
  kvLoraRank: number;
  qkNopeHeadDim: number;
  qkRopeHeadDim: number;
  vHeadDim: number;
  groups: number;
  topkGroups: number;
}

export type ModelDims = LlamaDims | Qwen2MoeDims | DeepseekV3Dims;

/** The dimensions a user (or the sizing search) may choose; everything else follows from them. */
export interface DimChoices {
  hidden: number;
  layers: number;
  experts?: number;
  heads?: number;
  vocab?: number;
  /**
   * For block-quantised FP8 (deepseek-v3): the tensor-parallel ranks the widths split over in whole
   * 128-wide blocks (and any divisor of it). 1 or absent: no such constraint. Other models ignore it.
   */
  fp8SplitRanks?: number;
}

export interface SynthTensor extends TensorSpec {
  dtype: ValueDtype;
  role: ValueRole;
}

/** Limits that keep a synthetic model's tensor list and headers a sane size. */
export const HIDDEN_MAX = 65536;
export const LAYERS_MAX = 1024;
export const EXPERTS_MAX = 1024;
export const VOCAB_MAX = 1 << 20;
export const LAYER_EXPERTS_MAX = 65536;
export const FP8_BLOCK = 128;
/** The most tensor-parallel ranks block-quantised widths are made to split over (a node's 8 GPUs). */
export const FP8_SPLIT_RANKS_MAX = 8;

export function invalidOptions(message: string): WeightcastError {
  return new WeightcastError('SYNTH_INVALID_OPTIONS', message);
}

export function roundUp(value: number, multiple: number): number {
  return Math.max(multiple, Math.ceil(value / multiple) * multiple);
}

/** The vocab size a model of this width would usually have, capped at the family's real vocab. */
export function defaultVocab(arch: SynthArch, hidden: number): number {
  const real = { llama: 128256, 'qwen2-moe': 151936, 'deepseek-v3': 129280 }[arch];
  return Math.max(VOCAB_MIN, Math.min(real, roundUp(hidden * (arch === 'qwen2-moe' ? 64 : 32), 64)));
}

/** The routed expert count a model of this width would usually have. */
export function defaultExperts(arch: SynthArch, hidden: number): number {
  if (arch === 'llama') return 0;
  const ladder = arch === 'qwen2-moe' ? [4, 8, 16, 32, 60, 64] : [8, 16, 32, 64, 128, 256];
  const widths = [256, 512, 1024, 2048, 4096];
  const step = widths.findIndex((width) => hidden < width);
  return ladder[step === -1 ? ladder.length - 1 : step] ?? 8;
}

export function deriveDims(arch: SynthArch, choices: DimChoices): ModelDims {
  checkInteger('hidden', choices.hidden, 1, HIDDEN_MAX);
  checkInteger('layers', choices.layers, 1, LAYERS_MAX);
  if (choices.heads !== undefined) checkInteger('heads', choices.heads, 1, HIDDEN_MAX);
  const splitRanks = choices.fp8SplitRanks ?? 1;
  if (![1, 2, 4, FP8_SPLIT_RANKS_MAX].includes(splitRanks)) {
    throw invalidOptions(`fp8SplitRanks must be 1, 2, 4 or ${FP8_SPLIT_RANKS_MAX}, got ${splitRanks}`);
  }
  const vocab = choices.vocab ?? defaultVocab(arch, choices.hidden);
  checkInteger('vocab', vocab, VOCAB_MIN, VOCAB_MAX);
  if (arch === 'llama') {
    if (choices.experts !== undefined) throw invalidOptions('llama is a dense model: it takes no experts');
    return llamaDims(choices, vocab);
  }
  const experts = choices.experts ?? defaultExperts(arch, choices.hidden);
  checkInteger('experts', experts, 2, EXPERTS_MAX);
  if (experts * choices.layers > LAYER_EXPERTS_MAX) {
    throw invalidOptions(`layers x experts is ${experts * choices.layers}, more than ${LAYER_EXPERTS_MAX}`);
  }
  return arch === 'qwen2-moe'
    ? qwen2MoeDims(choices, vocab, experts)
    : deepseekV3Dims(choices, vocab, experts);
}

function checkInteger(what: string, value: number, min: number, max: number): void {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw invalidOptions(`${what} must be an integer from ${min} to ${max}, got ${value}`);
  }
}

/** Heads for a given head width; a user's explicit head count must divide the hidden size evenly. */
function attentionHeads(choices: DimChoices, headDimDefault: number): { heads: number; headDim: number } {
  const { hidden, heads } = choices;
  if (heads === undefined) {
    if (hidden % headDimDefault !== 0) {
      throw invalidOptions(`hidden ${hidden} is not a multiple of ${headDimDefault}; give heads explicitly`);
    }
    return { heads: hidden / headDimDefault, headDim: headDimDefault };
  }
  if (hidden % heads !== 0) throw invalidOptions(`hidden ${hidden} is not divisible by heads ${heads}`);
  const headDim = hidden / heads;
  if (headDim % 2 !== 0) throw invalidOptions(`head_dim ${headDim} (hidden / heads) must be even for RoPE`);
  return { heads, headDim };
}

function largestDivisorAtMost(value: number, limit: number): number {
  for (let divisor = Math.min(value, limit); divisor > 1; divisor--)
    if (value % divisor === 0) return divisor;
  return 1;
}

function llamaDims(choices: DimChoices, vocab: number): LlamaDims {
  // Llama 3.2 1B uses 64-wide heads at hidden 2048; the larger models use 128.
  const { heads, headDim } = attentionHeads(choices, choices.hidden <= 2048 ? 64 : 128);
  return {
    arch: 'llama',
    hidden: choices.hidden,
    layers: choices.layers,
    heads,
    kvHeads: largestDivisorAtMost(heads, 8),
    headDim,
    intermediate: roundUp(choices.hidden * 3.5, 128),
    vocab,
  };
}

function qwen2MoeDims(choices: DimChoices, vocab: number, experts: number): Qwen2MoeDims {
  const { heads, headDim } = attentionHeads(choices, choices.hidden >= 1024 ? 128 : 64);
  // Qwen1.5-MoE-A2.7B: hidden 2048, experts 1408 wide, the shared expert four times that.
  const moeIntermediate = roundUp(choices.hidden * 0.6875, 64);
  return {
    arch: 'qwen2-moe',
    hidden: choices.hidden,
    layers: choices.layers,
    heads,
    kvHeads: heads,
    headDim,
    intermediate: moeIntermediate * 4,
    vocab,
    experts,
    expertsPerToken: Math.min(experts, experts >= 64 ? 8 : 4),
    moeIntermediate,
    sharedIntermediate: moeIntermediate * 4,
  };
}

function deepseekV3Dims(choices: DimChoices, vocab: number, experts: number): DeepseekV3Dims {
  const { hidden, layers } = choices;
  const wide = hidden >= 1024;
  const qkNopeHeadDim = wide ? 128 : 64;
  const qkRopeHeadDim = wide ? 64 : 32;
  const vHeadDim = wide ? 128 : 64;
  // Tensor parallelism cuts the MLPs by rows and attention by heads; with FP8 block scales every cut
  // must fall on a 128-element block, so these widths become multiples of 128 per rank.
  const splitRanks = choices.fp8SplitRanks ?? 1;
  // Each rank's heads times each per-head width (q_b, kv_b, o_proj) must fill whole blocks; the
  // per-width needs are powers of two, so the largest is a multiple of the others.
  const headMultiple = [qkNopeHeadDim + qkRopeHeadDim, qkNopeHeadDim + vHeadDim, vHeadDim]
    .map((width) => FP8_BLOCK / greatestCommonDivisor(FP8_BLOCK, width))
    .reduce((multiple, needed) => Math.max(multiple, needed), 1);
  // Multi-head latent attention has no hidden = heads x head_dim constraint; ratios follow DeepSeek-V3.
  const heads =
    choices.heads ??
    roundUp(
      hidden >= 7168 ? 128 : 2 ** Math.max(0, Math.round(Math.log2(hidden / 56))),
      splitRanks === 1 ? 1 : splitRanks * headMultiple,
    );
  const groups = [8, 4, 2, 1].find((g) => experts % g === 0 && experts / g >= 2) ?? 1;
  const topkGroups = Math.max(1, groups / 2);
  return {
    arch: 'deepseek-v3',
    hidden,
    layers,
    heads,
    kvHeads: heads,
    intermediate: roundUp((hidden * 18) / 7, FP8_BLOCK * splitRanks),
    vocab,
    experts,
    expertsPerToken: Math.min(8, topkGroups * (experts / groups)),
    sharedExperts: 1,
    moeIntermediate: roundUp((hidden * 2) / 7, splitRanks === 1 ? 64 : FP8_BLOCK * splitRanks),
    firstDenseLayers: Math.min(3, Math.floor(layers / 4)),
    qLoraRank: roundUp((hidden * 3) / 14, 64),
    kvLoraRank: Math.min(512, roundUp(hidden / 14, 64)),
    qkNopeHeadDim,
    qkRopeHeadDim,
    vHeadDim,
    groups,
    topkGroups,
  };
}

function greatestCommonDivisor(a: number, b: number): number {
  return b === 0 ? a : greatestCommonDivisor(b, a % b);
}

/** Where weights go: float dtype for everything unquantised, and how linear layers are quantised. */
interface Precision {
  float: ValueDtype;
  quantisation: 'none' | 'per-tensor' | 'per-block';
}

function precision(arch: SynthArch, dtype: SynthDtype): Precision {
  if (dtype === 'f8_e4m3') {
    return { float: 'BF16', quantisation: arch === 'deepseek-v3' ? 'per-block' : 'per-tensor' };
  }
  return { float: ({ bf16: 'BF16', f16: 'F16', f32: 'F32' } as const)[dtype], quantisation: 'none' };
}

class TensorList {
  readonly tensors: SynthTensor[] = [];
  constructor(readonly precision: Precision) {}

  plain(name: string, shape: number[], role: ValueRole, dtype: ValueDtype = this.precision.float): void {
    this.tensors.push({ name, dtype, shape, role });
  }

  /** A linear layer's weight [out, in], with its FP8 scale right after it when quantised. */
  linear(module: string, outFeatures: number, inFeatures: number): void {
    const weight = `${module}.weight`;
    const quantisation = this.precision.quantisation;
    if (quantisation === 'none') return this.plain(weight, [outFeatures, inFeatures], 'weight');
    this.plain(weight, [outFeatures, inFeatures], 'weight', 'F8_E4M3');
    if (quantisation === 'per-tensor') return this.plain(`${weight}_scale`, [], 'scale', 'F32');
    const blocks = [Math.ceil(outFeatures / FP8_BLOCK), Math.ceil(inFeatures / FP8_BLOCK)];
    this.plain(`${weight}_scale_inv`, blocks, 'scale', 'F32');
  }

  /** A SwiGLU MLP: gate and up project hidden -> width, down projects back. */
  mlp(module: string, hidden: number, width: number): void {
    this.linear(`${module}.gate_proj`, width, hidden);
    this.linear(`${module}.up_proj`, width, hidden);
    this.linear(`${module}.down_proj`, hidden, width);
  }
}

/** Everything about a model but its bytes. */
export function describeModel(
  dims: ModelDims,
  dtype: SynthDtype,
): { config: Record<string, unknown>; tensors: SynthTensor[] } {
  return { config: modelConfig(dims, dtype), tensors: modelTensors(dims, dtype) };
}

/** All tensors of the model in state-dict order: embeddings, layers, final norm, output head. */
export function modelTensors(dims: ModelDims, dtype: SynthDtype): SynthTensor[] {
  const list = new TensorList(precision(dims.arch, dtype));
  list.plain('model.embed_tokens.weight', [dims.vocab, dims.hidden], 'weight');
  for (let layer = 0; layer < dims.layers; layer++) addLayer(list, dims, layer);
  list.plain('model.norm.weight', [dims.hidden], 'norm');
  list.plain('lm_head.weight', [dims.vocab, dims.hidden], 'weight');
  return list.tensors;
}

function addLayer(list: TensorList, dims: ModelDims, layer: number): void {
  const prefix = `model.layers.${layer}`;
  if (dims.arch === 'llama') addLlamaLayer(list, dims, prefix);
  else if (dims.arch === 'qwen2-moe') addQwen2MoeLayer(list, dims, prefix);
  else addDeepseekV3Layer(list, dims, prefix, layer);
  list.plain(`${prefix}.input_layernorm.weight`, [dims.hidden], 'norm');
  list.plain(`${prefix}.post_attention_layernorm.weight`, [dims.hidden], 'norm');
}

function addLlamaLayer(list: TensorList, dims: LlamaDims, prefix: string): void {
  const { hidden, heads, kvHeads, headDim } = dims;
  list.linear(`${prefix}.self_attn.q_proj`, heads * headDim, hidden);
  list.linear(`${prefix}.self_attn.k_proj`, kvHeads * headDim, hidden);
  list.linear(`${prefix}.self_attn.v_proj`, kvHeads * headDim, hidden);
  list.linear(`${prefix}.self_attn.o_proj`, hidden, heads * headDim);
  list.mlp(`${prefix}.mlp`, hidden, dims.intermediate);
}

function addQwen2MoeLayer(list: TensorList, dims: Qwen2MoeDims, prefix: string): void {
  const { hidden, heads, kvHeads, headDim } = dims;
  // Qwen2 attention has biases on q, k and v, none on o.
  for (const [projection, width] of [
    ['q_proj', heads * headDim],
    ['k_proj', kvHeads * headDim],
    ['v_proj', kvHeads * headDim],
  ] as const) {
    list.linear(`${prefix}.self_attn.${projection}`, width, hidden);
    list.plain(`${prefix}.self_attn.${projection}.bias`, [width], 'bias');
  }
  list.linear(`${prefix}.self_attn.o_proj`, hidden, heads * headDim);
  list.plain(`${prefix}.mlp.gate.weight`, [dims.experts, hidden], 'weight');
  for (let expert = 0; expert < dims.experts; expert++) {
    list.mlp(`${prefix}.mlp.experts.${expert}`, hidden, dims.moeIntermediate);
  }
  list.mlp(`${prefix}.mlp.shared_expert`, hidden, dims.sharedIntermediate);
  list.plain(`${prefix}.mlp.shared_expert_gate.weight`, [1, hidden], 'weight');
}

function addDeepseekV3Layer(list: TensorList, dims: DeepseekV3Dims, prefix: string, layer: number): void {
  const { hidden, heads, qLoraRank, kvLoraRank, qkNopeHeadDim, qkRopeHeadDim, vHeadDim } = dims;
  const attention = `${prefix}.self_attn`;
  list.linear(`${attention}.q_a_proj`, qLoraRank, hidden);
  list.plain(`${attention}.q_a_layernorm.weight`, [qLoraRank], 'norm');
  list.linear(`${attention}.q_b_proj`, heads * (qkNopeHeadDim + qkRopeHeadDim), qLoraRank);
  list.linear(`${attention}.kv_a_proj_with_mqa`, kvLoraRank + qkRopeHeadDim, hidden);
  list.plain(`${attention}.kv_a_layernorm.weight`, [kvLoraRank], 'norm');
  list.linear(`${attention}.kv_b_proj`, heads * (qkNopeHeadDim + vHeadDim), kvLoraRank);
  list.linear(`${attention}.o_proj`, hidden, heads * vHeadDim);
  if (layer < dims.firstDenseLayers) return list.mlp(`${prefix}.mlp`, hidden, dims.intermediate);
  for (let expert = 0; expert < dims.experts; expert++) {
    list.mlp(`${prefix}.mlp.experts.${expert}`, hidden, dims.moeIntermediate);
  }
  // The router stays in the float dtype and its score-correction bias in F32, as in the real checkpoint.
  list.plain(`${prefix}.mlp.gate.weight`, [dims.experts, hidden], 'weight');
  list.plain(`${prefix}.mlp.gate.e_score_correction_bias`, [dims.experts], 'bias', 'F32');
  list.mlp(`${prefix}.mlp.shared_experts`, hidden, dims.moeIntermediate * dims.sharedExperts);
}

export function tensorByteSize(tensor: { dtype: ValueDtype; shape: readonly number[] }): number {
  return tensor.shape.reduce((product, dim) => product * dim, DTYPE_BITS[tensor.dtype] / 8);
}

/**
 * Total tensor bytes without building the whole list: layers of the same kind have the same size, so
 * one representative per kind is enough, and a layer's size grows by the same amount with each routed
 * expert (its MLP and its router row), so layers of one and two experts give the size of any. Sizing
 * calls this many times.
 */
export function modelTensorBytes(dims: ModelDims, dtype: SynthDtype): number {
  const list = new TensorList(precision(dims.arch, dtype));
  const listedBytes = (layerDims: ModelDims, layer: number): number => {
    list.tensors.length = 0;
    addLayer(list, layerDims, layer);
    return list.tensors.reduce((sum, tensor) => sum + tensorByteSize(tensor), 0);
  };
  const bytesOfLayer = (layer: number): number => {
    if (dims.arch === 'llama') return listedBytes(dims, layer);
    const one = listedBytes({ ...dims, experts: 1 }, layer);
    const two = listedBytes({ ...dims, experts: 2 }, layer);
    return one + (dims.experts - 1) * (two - one);
  };
  const denseLayers = dims.arch === 'deepseek-v3' ? dims.firstDenseLayers : dims.layers;
  let total = 0;
  if (denseLayers > 0) total += denseLayers * bytesOfLayer(0);
  if (denseLayers < dims.layers) total += (dims.layers - denseLayers) * bytesOfLayer(dims.layers - 1);
  const width = tensorByteSize({ dtype: list.precision.float, shape: [1] });
  return total + width * (2 * dims.vocab * dims.hidden + dims.hidden);
}

const TORCH_DTYPE: Record<SynthDtype, string> = {
  bf16: 'bfloat16',
  f16: 'float16',
  f32: 'float32',
  // FP8 checkpoints keep their unquantised tensors in BF16 and say so.
  f8_e4m3: 'bfloat16',
};

export function modelConfig(dims: ModelDims, dtype: SynthDtype): Record<string, unknown> {
  const ids = specialTokenIds(dims.arch);
  const common = {
    bos_token_id: ids.bos,
    eos_token_id: ids.eos,
    hidden_act: 'silu',
    hidden_size: dims.hidden,
    initializer_range: 0.02,
    intermediate_size: dims.intermediate,
    num_attention_heads: dims.heads,
    num_hidden_layers: dims.layers,
    num_key_value_heads: dims.kvHeads,
    tie_word_embeddings: false,
    torch_dtype: TORCH_DTYPE[dtype],
    transformers_version: TRANSFORMERS_VERSION,
    use_cache: true,
    vocab_size: dims.vocab,
  };
  const config =
    dims.arch === 'llama'
      ? llamaConfig(dims, common)
      : dims.arch === 'qwen2-moe'
        ? qwen2MoeConfig(dims, common)
        : deepseekV3Config(dims, common);
  const quantisation = quantisationConfig(dims, dtype);
  return sortKeys(quantisation === undefined ? config : { ...config, quantization_config: quantisation });
}

/** The context length each family declares; tokenizer_config.json repeats it. */
export function maxPositionEmbeddings(arch: SynthArch): number {
  return { llama: 8192, 'qwen2-moe': 8192, 'deepseek-v3': 163840 }[arch];
}

function llamaConfig(dims: LlamaDims, common: Record<string, unknown>): Record<string, unknown> {
  return {
    ...common,
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    attention_bias: false,
    attention_dropout: 0.0,
    head_dim: dims.headDim,
    max_position_embeddings: maxPositionEmbeddings('llama'),
    mlp_bias: false,
    pretraining_tp: 1,
    rms_norm_eps: 1e-5,
    rope_scaling: null,
    rope_theta: 500000.0,
  };
}

function qwen2MoeConfig(dims: Qwen2MoeDims, common: Record<string, unknown>): Record<string, unknown> {
  return {
    ...common,
    architectures: ['Qwen2MoeForCausalLM'],
    model_type: 'qwen2_moe',
    attention_dropout: 0.0,
    decoder_sparse_step: 1,
    max_position_embeddings: maxPositionEmbeddings('qwen2-moe'),
    max_window_layers: dims.layers,
    mlp_only_layers: [],
    moe_intermediate_size: dims.moeIntermediate,
    norm_topk_prob: false,
    num_experts: dims.experts,
    num_experts_per_tok: dims.expertsPerToken,
    output_router_logits: false,
    rms_norm_eps: 1e-6,
    rope_scaling: null,
    rope_theta: 1000000.0,
    router_aux_loss_coef: 0.001,
    shared_expert_intermediate_size: dims.sharedIntermediate,
    sliding_window: 32768,
    use_sliding_window: false,
  };
}

function deepseekV3Config(dims: DeepseekV3Dims, common: Record<string, unknown>): Record<string, unknown> {
  return {
    ...common,
    architectures: ['DeepseekV3ForCausalLM'],
    model_type: 'deepseek_v3',
    attention_bias: false,
    attention_dropout: 0.0,
    aux_loss_alpha: 0.001,
    ep_size: 1,
    first_k_dense_replace: dims.firstDenseLayers,
    kv_lora_rank: dims.kvLoraRank,
    max_position_embeddings: maxPositionEmbeddings('deepseek-v3'),
    moe_intermediate_size: dims.moeIntermediate,
    moe_layer_freq: 1,
    n_group: dims.groups,
    n_routed_experts: dims.experts,
    n_shared_experts: dims.sharedExperts,
    norm_topk_prob: true,
    num_experts_per_tok: dims.expertsPerToken,
    // The real checkpoint carries one multi-token-prediction layer; synthetic models carry none.
    num_nextn_predict_layers: 0,
    pretraining_tp: 1,
    q_lora_rank: dims.qLoraRank,
    qk_nope_head_dim: dims.qkNopeHeadDim,
    qk_rope_head_dim: dims.qkRopeHeadDim,
    rms_norm_eps: 1e-6,
    rope_scaling: {
      beta_fast: 32,
      beta_slow: 1,
      factor: 40,
      mscale: 1.0,
      mscale_all_dim: 1.0,
      original_max_position_embeddings: 4096,
      type: 'yarn',
    },
    rope_theta: 10000,
    routed_scaling_factor: 2.5,
    scoring_func: 'sigmoid',
    seq_aux: true,
    topk_group: dims.topkGroups,
    topk_method: 'noaux_tc',
    v_head_dim: dims.vHeadDim,
  };
}

/**
 * DeepSeek-V3's block-wise FP8 config, or for the others vLLM's per-tensor `fp8` format, which names
 * the linear layers it leaves unquantised.
 */
function quantisationConfig(dims: ModelDims, dtype: SynthDtype): Record<string, unknown> | undefined {
  if (dtype !== 'f8_e4m3') return undefined;
  if (dims.arch === 'deepseek-v3') {
    return {
      activation_scheme: 'dynamic',
      fmt: 'e4m3',
      quant_method: 'fp8',
      weight_block_size: [FP8_BLOCK, FP8_BLOCK],
    };
  }
  const ignored = ['lm_head'];
  if (dims.arch === 'qwen2-moe') {
    for (let layer = 0; layer < dims.layers; layer++) {
      ignored.push(`model.layers.${layer}.mlp.gate`, `model.layers.${layer}.mlp.shared_expert_gate`);
    }
  }
  return { activation_scheme: 'dynamic', ignored_layers: ignored, quant_method: 'fp8' };
}

function sortKeys(record: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
