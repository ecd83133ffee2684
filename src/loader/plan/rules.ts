/**
 * Architecture rules: what each tensor name means for parallelism, following how vLLM's model files
 * build their layers (Llama, Mistral, Qwen2/Qwen3, Qwen2/Qwen3-MoE, DeepSeek-V2/V3 naming).
 *
 * - Column-parallel (split dim 0): q/k/v by heads, gate/up, DeepSeek q_b_proj/kv_b_proj, expert and
 *   shared-expert gate/up; their biases follow them.
 * - Row-parallel (split dim 1): o_proj, down_proj, expert and shared-expert down; their biases are
 *   replicated (every rank holds the whole bias; vLLM adds it once after the reduction).
 * - Vocabulary-parallel (split dim 0 over the padded vocabulary): embed_tokens and lm_head.
 * - Replicated: norms, routers (`mlp.gate`, `e_score_correction_bias`, `shared_expert_gate`),
 *   DeepSeek q_a_proj/kv_a_proj_with_mqa and their layernorms, scalar FP8 scales.
 * - `weight_scale_inv` block scales follow their weight in blocks.
 *
 * Pure: names and the model's config in, a rule out. The builder turns rules into slices.
 */

import type { PlanModel } from './types.js';

/** Where a tensor lives in a pipeline: a decoder layer, or the first or last stage. */
export type Home =
  | { kind: 'layer'; layer: number }
  | { kind: 'first' }
  | { kind: 'last' }
  /** The input embedding: the first stage, and the last too when lm_head is tied to it. */
  | { kind: 'embedding' }
  /** Replicated everywhere (unknown tensors the caller chose to replicate). */
  | { kind: 'everywhere' };

/**
 * What a split divides: query heads (and the projections that follow them), KV heads (which follow the
 * query heads they serve), rows of an MLP (dense, shared expert, or one routed expert's), or the
 * padded vocabulary.
 */
export type SplitAxis = 'qHeads' | 'kvHeads' | 'rows' | 'vocab';

export type TensorRule =
  | { kind: 'replicated'; home: Home; expert: number | null }
  | {
      kind: 'split';
      home: Home;
      dim: 0 | 1;
      axis: SplitAxis;
      /** For head axes, the width of one head along `dim`, from the config. */
      headWidth: number | null;
      /** For routed experts: the expert index (split among its expert group's ranks). */
      expert: number | null;
    }
  /** A `weight_scale_inv` tensor: it follows `weight` in blocks of `blockSize` elements. */
  | { kind: 'blockScale'; home: Home; weight: string; expert: number | null }
  | { kind: 'skip'; reason: string }
  | { kind: 'unknown' };

type Linear =
  | { kind: 'column'; axis: SplitAxis; headWidth: number | null }
  | { kind: 'row'; axis: SplitAxis; headWidth: number | null }
  | { kind: 'replicated' };

const LAYER_NAME = /^model\.layers\.(\d+)\.(.+)$/;
const LINEAR_PARAM = /^(.+)\.(weight|bias|weight_scale_inv|weight_scale|input_scale)$/;
const EXPERT_MODULE = /^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)$/;
/** Norm weights and other small per-layer tensors every rank of the stage holds whole. */
const LAYER_REPLICATED = [
  /^[a-z_]*layernorm\.weight$/,
  /^self_attn\.(q_norm|k_norm)\.weight$/,
  /^self_attn\.(q_a_layernorm|kv_a_layernorm)\.weight$/,
  /^self_attn\.rotary_emb\.inv_freq$/,
  /^self_attn\.(k_scale|v_scale)$/,
  /^mlp\.gate\.e_score_correction_bias$/,
];

export function tensorRule(name: string, shape: readonly number[], model: PlanModel): TensorRule {
  const top = topLevelRule(name);
  if (top !== undefined) return top;
  const match = LAYER_NAME.exec(name);
  if (match?.[1] === undefined || match[2] === undefined) return { kind: 'unknown' };
  const layer = Number(match[1]);
  // DeepSeek-V3 checkpoints carry multi-token-prediction layers past the decoder; the model skips them.
  if (layer >= model.layers)
    return { kind: 'skip', reason: 'past num_hidden_layers (multi-token prediction)' };
  return layerRule(match[2], shape, { kind: 'layer', layer }, model);
}

function topLevelRule(name: string): TensorRule | undefined {
  if (name === 'model.embed_tokens.weight') {
    return {
      kind: 'split',
      home: { kind: 'embedding' },
      dim: 0,
      axis: 'vocab',
      headWidth: null,
      expert: null,
    };
  }
  if (name === 'lm_head.weight') {
    return { kind: 'split', home: { kind: 'last' }, dim: 0, axis: 'vocab', headWidth: null, expert: null };
  }
  if (name === 'model.norm.weight') return { kind: 'replicated', home: { kind: 'last' }, expert: null };
  return undefined;
}

function layerRule(suffix: string, shape: readonly number[], home: Home, model: PlanModel): TensorRule {
  if (LAYER_REPLICATED.some((pattern) => pattern.test(suffix)))
    return { kind: 'replicated', home, expert: null };
  const param = LINEAR_PARAM.exec(suffix);
  if (param?.[1] === undefined || param[2] === undefined) return { kind: 'unknown' };
  const module = param[1];
  const expertMatch = EXPERT_MODULE.exec(module);
  const expert = expertMatch?.[1] === undefined || model.experts === 0 ? null : Number(expertMatch[1]);
  const linear = linearKind(module, model, expert !== null);
  if (linear === undefined) return { kind: 'unknown' };
  // Per-tensor FP8 scales (a single number) and activation scales belong whole to every rank.
  const scalar = shape.reduce((product, size) => product * size, 1) <= 1;
  if (param[2] === 'input_scale' || (param[2] === 'weight_scale' && scalar)) {
    return { kind: 'replicated', home, expert };
  }
  return paramRule(param[2], linear, home, `${prefixOf(home)}${module}.weight`, expert);
}

function prefixOf(home: Home): string {
  return home.kind === 'layer' ? `model.layers.${home.layer}.` : '';
}

function paramRule(
  param: string,
  linear: Linear,
  home: Home,
  weight: string,
  expert: number | null,
): TensorRule {
  if (param === 'weight_scale_inv') return { kind: 'blockScale', home, weight, expert };
  const split = (dim: 0 | 1, axis: SplitAxis, headWidth: number | null): TensorRule => ({
    kind: 'split',
    home,
    dim,
    axis,
    headWidth,
    expert,
  });
  if (linear.kind === 'replicated') return { kind: 'replicated', home, expert };
  if (param === 'weight') return split(linear.kind === 'column' ? 0 : 1, linear.axis, linear.headWidth);
  // A column-parallel layer's bias (and per-channel scales) are per output row: they split with it.
  // A row-parallel layer's outputs are whole on every rank, so its bias and scales are replicated.
  if (linear.kind === 'column') return split(0, linear.axis, linear.headWidth);
  return { kind: 'replicated', home, expert };
}

function linearKind(module: string, model: PlanModel, isExpert: boolean): Linear | undefined {
  if (isExpert) {
    return module.endsWith('down_proj')
      ? { kind: 'row', axis: 'rows', headWidth: null }
      : { kind: 'column', axis: 'rows', headWidth: null };
  }
  const attention = attentionKind(module, model);
  if (attention !== undefined) return attention;
  if (/^mlp\.(shared_experts?\.)?(gate_proj|up_proj)$/.test(module))
    return { kind: 'column', axis: 'rows', headWidth: null };
  if (/^mlp\.(shared_experts?\.)?down_proj$/.test(module))
    return { kind: 'row', axis: 'rows', headWidth: null };
  if (model.experts > 0 && (module === 'mlp.gate' || module === 'mlp.shared_expert_gate'))
    return { kind: 'replicated' };
  return undefined;
}

function attentionKind(module: string, model: PlanModel): Linear | undefined {
  const mla = model.latentAttention;
  if (mla === null) {
    if (module === 'self_attn.q_proj') return { kind: 'column', axis: 'qHeads', headWidth: model.headDim };
    if (module === 'self_attn.k_proj' || module === 'self_attn.v_proj') {
      return { kind: 'column', axis: 'kvHeads', headWidth: model.headDim };
    }
    if (module === 'self_attn.o_proj') return { kind: 'row', axis: 'qHeads', headWidth: model.headDim };
    return undefined;
  }
  const qkHeadDim = mla.qkNopeHeadDim + mla.qkRopeHeadDim;
  switch (module) {
    case 'self_attn.q_proj':
    case 'self_attn.q_b_proj':
      return { kind: 'column', axis: 'qHeads', headWidth: qkHeadDim };
    case 'self_attn.kv_b_proj':
      return { kind: 'column', axis: 'qHeads', headWidth: mla.qkNopeHeadDim + mla.vHeadDim };
    case 'self_attn.o_proj':
      return { kind: 'row', axis: 'qHeads', headWidth: mla.vHeadDim };
    case 'self_attn.q_a_proj':
    case 'self_attn.kv_a_proj_with_mqa':
      return { kind: 'replicated' };
    default:
      return undefined;
  }
}
