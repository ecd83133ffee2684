/**
 * Names in pre-sharded output, pure: rank part files, vLLM's fused modules, FP8 scale tensors, and
 * which source tensors are linear weights that `--quantize fp8` turns into E4M3.
 */

import type { PlanArchitecture } from '../plan/types.js';

/** vLLM `sharded_state`'s file pattern: part from 0, not padded. */
export function rankPartFileName(rank: number, part: number): string {
  return `model-rank-${rank}-part-${part}.safetensors`;
}

export const RANK_PART_PATTERN = /^model-rank-(\d+)-part-(\d+)\.safetensors$/;

/** The manifest pre-sharding writes next to the rank files. */
export const PRESHARD_MANIFEST_NAME = 'weightcast-preshard.json';
/** The usual weightcast manifest of the whole output directory (pieces, Merkle roots, tensor index). */
export const OUTPUT_MANIFEST_NAME = 'weightcast-manifest.json';

/**
 * A fused module of vLLM's Llama/Qwen2 families: the checkpoint modules it stacks along dim 0, in
 * order (vLLM's `stacked_params_mapping`: q, k, v into qkv_proj; gate then up into gate_up_proj).
 */
export interface FusionRule {
  fused: string;
  parts: readonly string[];
}

export const FUSION_RULES: readonly FusionRule[] = [
  { fused: 'qkv_proj', parts: ['q_proj', 'k_proj', 'v_proj'] },
  { fused: 'gate_up_proj', parts: ['gate_proj', 'up_proj'] },
];

/** Architectures whose vLLM models fuse exactly those modules (routed experts aside). */
export const FUSING_ARCHITECTURES: readonly PlanArchitecture[] = [
  'llama',
  'mistral',
  'qwen2',
  'qwen3',
  'qwen2_moe',
  'qwen3_moe',
];

const MODULE_PARAM = /^(.+)\.([a-z_]+)\.(weight|bias)$/;
/**
 * Routed experts are left unfused: vLLM stacks them into one FusedMoE tensor per layer (w13, w2)
 * whose layout depends on the kernel, which is not a per-module rename.
 */
const ROUTED_EXPERT = /\.experts\.\d+$/;

/** Where a source tensor goes when fused: the fused name and its position among the parts. */
export interface FusionTarget {
  name: string;
  index: number;
  parts: number;
}

export function fusionTarget(name: string): FusionTarget | undefined {
  const match = MODULE_PARAM.exec(name);
  if (match === null) return undefined;
  const [, prefix, module, param] = match as unknown as [string, string, string, string];
  if (ROUTED_EXPERT.test(prefix)) return undefined;
  for (const rule of FUSION_RULES) {
    const index = rule.parts.indexOf(module);
    if (index !== -1) return { name: `${prefix}.${rule.fused}.${param}`, index, parts: rule.parts.length };
  }
  return undefined;
}

/** The source name of part `index` of a fused tensor (inverse of fusionTarget). */
export function fusionPartName(fusedName: string, index: number): string | undefined {
  const match = MODULE_PARAM.exec(fusedName);
  if (match === null) return undefined;
  const [, prefix, module, param] = match as unknown as [string, string, string, string];
  const rule = FUSION_RULES.find((candidate) => candidate.fused === module);
  const part = rule?.parts[index];
  return part === undefined ? undefined : `${prefix}.${part}.${param}`;
}

/**
 * Linear weights of decoder layers (attention and MLP projections, experts included): what FP8
 * quantises. Routers (`mlp.gate`, `shared_expert_gate`), norms, biases, embeddings and lm_head are not.
 */
const LINEAR_WEIGHT = /^model\.layers\.\d+\.(.+\.)?[a-z_]*proj[a-z_]*\.weight$/;

export function isQuantisableName(name: string): boolean {
  return LINEAR_WEIGHT.test(name);
}

/** `x.weight` -> `x.weight_scale` (per-tensor) or `x.weight_scale_inv` (blocks). */
export function scaleName(weightName: string, scheme: 'per-tensor' | 'block'): string {
  return `${weightName}${scheme === 'per-tensor' ? '_scale' : '_scale_inv'}`;
}
