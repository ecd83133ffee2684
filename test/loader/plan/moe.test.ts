/**
 * Mixture-of-experts models (Qwen2-MoE and DeepSeek-V3 from the synthesiser; an FP8 block-quantised
 * DeepSeek-style model written here): expert parallelism, expert tensor parallelism, routers and
 * latent-attention projections, and FP8 block scales that follow their weights.
 */

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { isWeightcastError } from '../../../src/errors.js';
import { buildParallelPlan } from '../../../src/loader/plan/build.js';
import { readModelDirectory, type ModelDirectory } from '../../../src/loader/plan/files.js';
import type { ParallelPlan, RankTensor } from '../../../src/loader/plan/types.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';
import { checkPlanBytes, checkPlanTiles, deepseekLike, writeTinyModel } from './helpers.js';

let root: { path: string; cleanup: () => Promise<void> };
let qwen: ModelDirectory;
let deepseek: ModelDirectory;

before(async () => {
  root = await tempDir('plan-moe');
  // Qwen2-MoE: 2 heads of 64, 4 experts 128 wide, shared expert 512 wide.
  await synthesizeModel({
    dir: join(root.path, 'qwen'),
    arch: 'qwen2-moe',
    hidden: 128,
    layers: 2,
    experts: 4,
    vocab: 500,
    seed: 3,
  });
  qwen = await readModelDirectory(join(root.path, 'qwen'));
  // DeepSeek-V3: 4 heads, layer 0 dense (768 wide), layers 1-3 with 6 experts 128 wide and a shared expert.
  await synthesizeModel({
    dir: join(root.path, 'deepseek'),
    arch: 'deepseek-v3',
    hidden: 256,
    layers: 4,
    experts: 6,
    vocab: 500,
    seed: 4,
  });
  deepseek = await readModelDirectory(join(root.path, 'deepseek'));
});

after(async () => {
  await root.cleanup();
});

function held(result: ParallelPlan, rank: number, name: string): RankTensor | undefined {
  return result.ranks[rank]?.tensors.find((candidate) => candidate.name === name);
}

const names = (source: ModelDirectory): string[] => source.tensors.map((tensor) => tensor.name);

test('qwen2-moe: experts tensor-parallel by default, whole per rank with ep, router and shared gate replicated', async () => {
  const tp = buildParallelPlan(qwen, { tp: 2 });
  assert.deepEqual(held(tp, 1, 'model.layers.0.mlp.experts.3.gate_proj.weight')?.slice, {
    dim: 0,
    start: 64,
    length: 64,
  });
  assert.deepEqual(held(tp, 1, 'model.layers.0.mlp.experts.3.down_proj.weight')?.slice, {
    dim: 1,
    start: 64,
    length: 64,
  });
  assert.deepEqual(held(tp, 0, 'model.layers.0.mlp.shared_expert.up_proj.weight')?.slice, {
    dim: 0,
    start: 0,
    length: 256,
  });
  assert.equal(held(tp, 1, 'model.layers.1.mlp.gate.weight')?.slice, null);
  assert.equal(held(tp, 1, 'model.layers.1.mlp.shared_expert_gate.weight')?.slice, null);
  assert.deepEqual(held(tp, 1, 'model.layers.1.self_attn.k_proj.bias')?.slice, {
    dim: 0,
    start: 64,
    length: 64,
  });

  const ep = buildParallelPlan(qwen, { tp: 2, ep: 2 });
  assert.deepEqual(
    ep.ranks.map((rank) => rank.experts),
    [
      [0, 2],
      [2, 4],
    ],
  );
  assert.equal(held(ep, 1, 'model.layers.0.mlp.experts.1.up_proj.weight'), undefined);
  assert.equal(held(ep, 1, 'model.layers.0.mlp.experts.2.up_proj.weight')?.slice, null);
  // Attention stays tensor-parallel.
  assert.deepEqual(held(ep, 1, 'model.layers.0.self_attn.q_proj.weight')?.slice, {
    dim: 0,
    start: 64,
    length: 64,
  });

  // ep 4 over tp 2: two data-parallel copies of the attention group, one expert per rank.
  const wide = buildParallelPlan(qwen, { tp: 2, ep: 4 });
  assert.equal(wide.ranks.length, 4);
  assert.deepEqual(
    wide.ranks.map((rank) => rank.tpRank),
    [0, 1, 0, 1],
  );
  assert.deepEqual(
    wide.ranks.map((rank) => rank.experts[0]),
    [0, 1, 2, 3],
  );
  for (const options of [
    { tp: 2 },
    { tp: 2, ep: 2 },
    { tp: 2, ep: 4 },
    { tp: 1, ep: 4 },
    { tp: 1, ep: 2, pp: 2 },
  ]) {
    const result = buildParallelPlan(qwen, options);
    checkPlanTiles(result, names(qwen));
    await checkPlanBytes(qwen.dir, result, { hash: options.ep === 4 && options.tp === 2 });
  }
});

test('deepseek-v3: latent attention split by head, q_a/kv_a replicated, experts by expert group', async () => {
  const result = buildParallelPlan(deepseek, { tp: 4, ep: 2 });
  const rank = 3;
  // 4 heads: q_b rows are 96 per head (64 nope + 32 rope), kv_b 128 per head (64 + 64), o_proj 64 columns.
  assert.deepEqual(held(result, rank, 'model.layers.1.self_attn.q_b_proj.weight')?.slice, {
    dim: 0,
    start: 288,
    length: 96,
  });
  assert.deepEqual(held(result, rank, 'model.layers.1.self_attn.kv_b_proj.weight')?.slice, {
    dim: 0,
    start: 384,
    length: 128,
  });
  assert.deepEqual(held(result, rank, 'model.layers.1.self_attn.o_proj.weight')?.slice, {
    dim: 1,
    start: 192,
    length: 64,
  });
  for (const replicated of [
    'model.layers.1.self_attn.q_a_proj.weight',
    'model.layers.1.self_attn.kv_a_proj_with_mqa.weight',
    'model.layers.1.self_attn.q_a_layernorm.weight',
    'model.layers.1.self_attn.kv_a_layernorm.weight',
    'model.layers.1.mlp.gate.weight',
    'model.layers.1.mlp.gate.e_score_correction_bias',
  ]) {
    assert.equal(held(result, rank, replicated)?.slice, null, replicated);
  }
  // 6 experts over 2 groups of 2 ranks: group 1 (ranks 2-3) has experts 3-5, split in two by rows.
  assert.deepEqual(result.ranks[rank]?.experts, [3, 6]);
  assert.deepEqual(held(result, rank, 'model.layers.2.mlp.experts.4.gate_proj.weight')?.slice, {
    dim: 0,
    start: 64,
    length: 64,
  });
  assert.equal(held(result, rank, 'model.layers.2.mlp.experts.2.gate_proj.weight'), undefined);
  // Shared experts and the dense first layer follow the whole tp group.
  assert.deepEqual(held(result, rank, 'model.layers.2.mlp.shared_experts.down_proj.weight')?.slice, {
    dim: 1,
    start: 96,
    length: 32,
  });
  assert.deepEqual(held(result, rank, 'model.layers.0.mlp.gate_proj.weight')?.slice, {
    dim: 0,
    start: 576,
    length: 192,
  });
  for (const options of [
    { tp: 1 },
    { tp: 2 },
    { tp: 4 },
    { tp: 4, ep: 2 },
    { tp: 4, ep: 4 },
    { tp: 2, pp: 2, ep: 2 },
    { tp: 2, weights: [3, 1] },
  ]) {
    const plan = buildParallelPlan(deepseek, options);
    checkPlanTiles(plan, names(deepseek));
    await checkPlanBytes(deepseek.dir, plan, { hash: options.tp === 4 && options.ep === 4 });
  }
  // Weighted: 3 of 4 heads, and of the 6 experts' rows on the expert groups' single ranks.
  const weighted = buildParallelPlan(deepseek, { tp: 2, ep: 2, weights: [3, 1] });
  assert.deepEqual(
    weighted.ranks.map((entry) => entry.experts),
    [
      [0, 5],
      [5, 6],
    ],
  );
  assert.deepEqual(held(weighted, 1, 'model.layers.1.self_attn.kv_b_proj.weight')?.slice, {
    dim: 0,
    start: 384,
    length: 128,
  });
  await checkPlanBytes(deepseek.dir, weighted);
  assert.throws(
    () => buildParallelPlan(deepseek, { tp: 2, ep: 3 }),
    (error) => isWeightcastError(error, 'PLAN_INVALID_OPTIONS'),
  );
});

test('FP8 block scales follow their weights in 128-blocks; misaligned splits are refused', async () => {
  const dir = join(root.path, 'deepseek-fp8');
  await writeTinyModel(
    dir,
    deepseekLike({
      layers: 2,
      firstDense: 1,
      hidden: 128,
      heads: 8,
      nope: 64,
      rope: 64,
      v: 128,
      qLora: 128,
      kvLora: 128,
      intermediate: 512,
      moeIntermediate: 512,
      experts: 4,
      vocab: 300,
      fp8Block: true,
      mtpLayer: true,
    }),
    'fp8',
  );
  const source = await readModelDirectory(dir);
  const result = buildParallelPlan(source, { tp: 2 });
  // The multi-token-prediction layer (layer 2 of a 2-layer model) is loaded by no rank.
  assert.ok(result.skipped.includes('model.layers.2.self_attn.q_b_proj.weight'));
  // q_b: 8 heads x 128 rows; rank 1 takes rows 512-1023, scale rows 4-7 (all 1 column block of q_lora 128).
  assert.deepEqual(held(result, 1, 'model.layers.0.self_attn.q_b_proj.weight')?.slice, {
    dim: 0,
    start: 512,
    length: 512,
  });
  assert.deepEqual(held(result, 1, 'model.layers.0.self_attn.q_b_proj.weight_scale_inv')?.slice, {
    dim: 0,
    start: 4,
    length: 4,
  });
  // o_proj columns 512-1023 of 1024: scale columns 4-7.
  assert.deepEqual(held(result, 1, 'model.layers.0.self_attn.o_proj.weight_scale_inv')?.slice, {
    dim: 1,
    start: 4,
    length: 4,
  });
  // Replicated weights keep their whole scales.
  assert.equal(held(result, 1, 'model.layers.0.self_attn.q_a_proj.weight_scale_inv')?.slice, null);
  assert.deepEqual(held(result, 0, 'model.layers.1.mlp.experts.2.down_proj.weight_scale_inv')?.slice, {
    dim: 1,
    start: 0,
    length: 2,
  });
  for (const options of [
    { tp: 1 },
    { tp: 2 },
    { tp: 4 },
    { tp: 2, ep: 2 },
    { tp: 1, ep: 4 },
    { tp: 2, weights: [3, 1] },
    { tp: 1, pp: 2 },
  ]) {
    const plan = buildParallelPlan(source, options);
    checkPlanTiles(plan, names(source));
    await checkPlanBytes(dir, plan, { hash: options.tp === 2 && options.ep === 2 });
  }
  // tp 8: one head of q_b (128 rows) is a block, but kv_b's 192 rows are not.
  assert.throws(
    () => buildParallelPlan(source, { tp: 8, ep: 4 }),
    (error) => isWeightcastError(error, 'PLAN_BLOCK_MISALIGNED'),
  );

  // The synthesiser's FP8 DeepSeek (96-row heads at this width) has heads and MLP widths chosen so
  // that tp 2, 4 and 8 cut only whole blocks; it used to be refused even at tp 2.
  const synthDir = join(root.path, 'deepseek-synth-fp8');
  await synthesizeModel({
    dir: synthDir,
    arch: 'deepseek-v3',
    dtype: 'f8_e4m3',
    hidden: 256,
    layers: 1,
    experts: 2,
    vocab: 400,
    seed: 5,
  });
  const synth = await readModelDirectory(synthDir);
  for (const tp of [2, 4, 8]) {
    const plan = buildParallelPlan(synth, { tp });
    checkPlanTiles(plan, names(synth));
    await checkPlanBytes(synthDir, plan, { hash: tp === 8 });
  }
  const single = buildParallelPlan(synth, { tp: 1, ep: 1 });
  await checkPlanBytes(synthDir, single);
});
