/**
 * Reads the values a plan needs from a Hugging Face `config.json` (already parsed) and checks them:
 * architecture, layer and head counts, head size, vocabulary, experts, DeepSeek's latent-attention
 * widths and the FP8 block size. Anything missing or absurd is a PLAN_UNSUPPORTED_MODEL error here, so
 * the rules and the split math can trust what they get.
 */

import { WeightcastError } from '../../errors.js';
import { PLAN_ARCHITECTURES, type LatentAttention, type PlanArchitecture, type PlanModel } from './types.js';

/** Larger than any real model by orders of magnitude; past this a config is broken or hostile. */
const DIMENSION_MAX = 1 << 24;
const DEFAULT_BLOCK = 128;

type Config = Record<string, unknown>;

function unsupported(message: string): WeightcastError {
  return new WeightcastError('PLAN_UNSUPPORTED_MODEL', message);
}

function integer(config: Config, key: string, min = 1): number {
  const value = config[key];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > DIMENSION_MAX) {
    throw unsupported(
      `config.json: ${key} must be an integer from ${min} to ${DIMENSION_MAX}, got ${String(value)}`,
    );
  }
  return value;
}

function optionalInteger(config: Config, key: string, min = 1): number | undefined {
  return config[key] === undefined || config[key] === null ? undefined : integer(config, key, min);
}

export function architectureOf(config: Config): PlanArchitecture {
  const modelType = config['model_type'];
  const known = PLAN_ARCHITECTURES.find((name) => name === modelType);
  if (known === undefined) {
    throw unsupported(
      `config.json: model_type ${JSON.stringify(modelType)} is not one plans know (${PLAN_ARCHITECTURES.join(', ')})`,
    );
  }
  return known;
}

export function readPlanModel(raw: unknown): PlanModel {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw unsupported('config.json is not a JSON object');
  }
  const config = raw as Config;
  const architecture = architectureOf(config);
  const hiddenSize = integer(config, 'hidden_size');
  const heads = integer(config, 'num_attention_heads');
  const kvHeads = optionalInteger(config, 'num_key_value_heads') ?? heads;
  if (heads % kvHeads !== 0) {
    throw unsupported(
      `config.json: num_attention_heads ${heads} is not a multiple of num_key_value_heads ${kvHeads}`,
    );
  }
  const latentAttention = architecture.startsWith('deepseek') ? readLatentAttention(config) : null;
  const explicitHeadDim = optionalInteger(config, 'head_dim');
  const headDim = explicitHeadDim ?? Math.floor(hiddenSize / heads);
  // Mistral-Nemo and Qwen3 name a head_dim that hidden_size / heads would not give; others leave it out.
  if (latentAttention === null && explicitHeadDim === undefined && headDim * heads !== hiddenSize) {
    throw unsupported(
      `config.json: hidden_size ${hiddenSize} is not divisible by num_attention_heads ${heads}`,
    );
  }
  return {
    architecture,
    hiddenSize,
    layers: integer(config, 'num_hidden_layers'),
    heads,
    kvHeads: latentAttention === null ? kvHeads : heads,
    headDim,
    vocabSize: integer(config, 'vocab_size'),
    experts: readExperts(config, architecture),
    latentAttention,
    blockSize: readBlockSize(config),
    tieWordEmbeddings: config['tie_word_embeddings'] === true,
  };
}

function readExperts(config: Config, architecture: PlanArchitecture): number {
  if (architecture === 'qwen2_moe' || architecture === 'qwen3_moe') return integer(config, 'num_experts');
  if (architecture.startsWith('deepseek')) return optionalInteger(config, 'n_routed_experts') ?? 0;
  return 0;
}

function readLatentAttention(config: Config): LatentAttention {
  return {
    qkNopeHeadDim: integer(config, 'qk_nope_head_dim'),
    qkRopeHeadDim: integer(config, 'qk_rope_head_dim'),
    vHeadDim: integer(config, 'v_head_dim'),
    qLoraRank: optionalInteger(config, 'q_lora_rank') ?? null,
    kvLoraRank: integer(config, 'kv_lora_rank'),
  };
}

/**
 * Block-wise FP8 (DeepSeek-V3, Qwen3-FP8) names its block in quantization_config.weight_block_size;
 * per-tensor FP8 has none, and then no weight carries block scales.
 */
function readBlockSize(config: Config): [number, number] | null {
  const quantisation = config['quantization_config'];
  if (typeof quantisation !== 'object' || quantisation === null) return null;
  const block = (quantisation as Config)['weight_block_size'];
  if (block === undefined || block === null) return null;
  const valid =
    Array.isArray(block) &&
    block.length === 2 &&
    block.every(
      (value) => typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= DIMENSION_MAX,
    );
  if (!valid)
    throw unsupported(
      `config.json: weight_block_size must be two positive integers, got ${JSON.stringify(block)}`,
    );
  return [block[0] as number, block[1] as number];
}

/** The block size to assume for `weight_scale_inv` tensors when the config does not name one. */
export function blockSizeOrDefault(model: PlanModel): [number, number] {
  return model.blockSize ?? [DEFAULT_BLOCK, DEFAULT_BLOCK];
}
