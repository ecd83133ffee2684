/**
 * Dense models (Llama from the synthesiser; GQA Llama, Mistral, Qwen2 and Qwen3 written here): every
 * plan's byte ranges reproduce the in-memory slice exactly, slices tile their tensors, and the slices
 * are the ones vLLM would load.
 */

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { isWeightcastError } from '../../../src/errors.js';
import { buildParallelPlan } from '../../../src/loader/plan/build.js';
import { readModelDirectory, type ModelDirectory } from '../../../src/loader/plan/files.js';
import type { ParallelPlan, ParallelismOptions, RankTensor } from '../../../src/loader/plan/types.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';
import { checkPlanBytes, checkPlanTiles, llamaLike, writeTinyModel } from './helpers.js';

let root: { path: string; cleanup: () => Promise<void> };
let llama: ModelDirectory;
let gqa: ModelDirectory;

before(async () => {
  root = await tempDir('plan-dense');
  // hidden 128 with 8 heads of 16; intermediate 512; vocab 1000 pads to 1024; 3 layers for pp.
  await synthesizeModel({
    dir: join(root.path, 'llama'),
    arch: 'llama',
    hidden: 128,
    heads: 8,
    layers: 3,
    vocab: 1000,
    seed: 1,
  });
  llama = await readModelDirectory(join(root.path, 'llama'));
  await writeTinyModel(
    join(root.path, 'gqa'),
    llamaLike({
      modelType: 'llama',
      layers: 2,
      hidden: 64,
      heads: 8,
      kvHeads: 2,
      headDim: 8,
      intermediate: 192,
      vocab: 300,
    }),
  );
  gqa = await readModelDirectory(join(root.path, 'gqa'));
});

after(async () => {
  await root.cleanup();
});

function plan(source: ModelDirectory, options: ParallelismOptions): ParallelPlan {
  return buildParallelPlan(source, options);
}

function held(result: ParallelPlan, rank: number, name: string): RankTensor {
  const tensor = result.ranks[rank]?.tensors.find((candidate) => candidate.name === name);
  assert.ok(tensor, `rank ${rank} does not hold ${name}`);
  return tensor;
}

const names = (source: ModelDirectory): string[] => source.tensors.map((tensor) => tensor.name);

test('llama tp 1 to 8: byte ranges reproduce the in-memory slices (odd tp through equal weights)', async () => {
  for (let tp = 1; tp <= 8; tp++) {
    const even = 8 % tp === 0;
    if (!even) {
      // vLLM needs heads divisible by tp; an even split refuses, equal weights round to whole heads.
      assert.throws(
        () => plan(llama, { tp }),
        (error) => isWeightcastError(error, 'PLAN_INDIVISIBLE'),
      );
    }
    const result = plan(llama, even ? { tp } : { tp, weights: new Array<number>(tp).fill(1) });
    assert.equal(result.ranks.length, tp);
    checkPlanTiles(result, names(llama));
    await checkPlanBytes(llama.dir, result, { hash: tp === 8, diskReadsPerRank: tp === 2 ? 3 : 0 });
  }
});

test('llama even tp follows vLLM: heads, MLP rows, padded vocabulary', () => {
  const result = plan(llama, { tp: 8 });
  for (let rank = 0; rank < 8; rank++) {
    // 8 heads of 16 rows: one head each; o_proj takes the same columns.
    assert.deepEqual(held(result, rank, 'model.layers.0.self_attn.q_proj.weight').slice, {
      dim: 0,
      start: rank * 16,
      length: 16,
    });
    assert.deepEqual(held(result, rank, 'model.layers.0.self_attn.o_proj.weight').slice, {
      dim: 1,
      start: rank * 16,
      length: 16,
    });
    assert.deepEqual(held(result, rank, 'model.layers.2.mlp.down_proj.weight').slice, {
      dim: 1,
      start: rank * 64,
      length: 64,
    });
    assert.equal(held(result, rank, 'model.layers.1.input_layernorm.weight').slice, null);
    // 1024 padded rows, 128 per rank; the last rank holds 1000 - 896 = 104 real rows.
    const embedding = held(result, rank, 'model.embed_tokens.weight').slice;
    assert.deepEqual(embedding, { dim: 0, start: rank * 128, length: rank === 7 ? 104 : 128, padded: 128 });
  }
  const totals = result.ranks[0]?.totals;
  assert.ok(totals);
  assert.equal(totals.sourceBytes, totals.sliceBytes + totals.replicatedBytes);
  // A rank of 8 moves about an eighth of the model, plus the small replicated norms.
  assert.ok(totals.sourceBytes < result.modelBytes / 7, `${totals.sourceBytes} of ${result.modelBytes}`);
});

test('GQA: KV heads split when tp divides them and are replicated when tp exceeds them', async () => {
  const k = 'model.layers.1.self_attn.k_proj.weight';
  for (const tp of [1, 2, 4, 8]) {
    const result = plan(gqa, { tp });
    for (let rank = 0; rank < tp; rank++) {
      // vLLM: kv_heads / tp each when tp <= kv_heads, else head rank / (tp / kv_heads) on each rank.
      const kvIndex = tp <= 2 ? (rank * 2) / tp : Math.floor(rank / (tp / 2));
      const kvCount = tp <= 2 ? 2 / tp : 1;
      // With tp 1 the one rank holds everything whole.
      const expected = (start: number, length: number): object | null =>
        tp === 1 ? null : { dim: 0, start, length };
      assert.deepEqual(
        held(result, rank, k).slice,
        expected(kvIndex * 8, kvCount * 8),
        `tp ${tp} rank ${rank}`,
      );
      assert.deepEqual(
        held(result, rank, 'model.layers.1.self_attn.q_proj.weight').slice,
        expected((rank * 64) / tp, 64 / tp),
      );
    }
    checkPlanTiles(result, names(gqa));
    await checkPlanBytes(gqa.dir, result, { hash: tp === 4 });
  }
  // 3 ranks cannot share 2 KV heads evenly, as vLLM refuses.
  assert.throws(
    () => plan(gqa, { tp: 3 }),
    (error) => isWeightcastError(error, 'PLAN_INDIVISIBLE'),
  );
});

test('uneven weights: rank 0 gets three quarters, rounded to whole heads, units and vocab blocks', async () => {
  const result = plan(llama, { tp: 2, weights: [3, 1] });
  assert.deepEqual(held(result, 0, 'model.layers.0.self_attn.q_proj.weight').slice, {
    dim: 0,
    start: 0,
    length: 96,
  });
  assert.deepEqual(held(result, 1, 'model.layers.0.self_attn.q_proj.weight').slice, {
    dim: 0,
    start: 96,
    length: 32,
  });
  // 512 rows in units of 32: 16 units, 12 and 4.
  assert.deepEqual(held(result, 1, 'model.layers.0.mlp.gate_proj.weight').slice, {
    dim: 0,
    start: 384,
    length: 128,
  });
  // 1024 padded rows in 16 blocks of 64: 12 and 4; rank 1's 256 rows hold 232 real ones.
  assert.deepEqual(held(result, 1, 'lm_head.weight').slice, { dim: 0, start: 768, length: 232, padded: 256 });
  checkPlanTiles(result, names(llama));
  await checkPlanBytes(llama.dir, result, { hash: true });

  // With GQA, each rank takes the KV heads its query heads read: rank 0's heads 0-5 need both (the
  // whole tensor), rank 1's heads 6-7 the second.
  const grouped = plan(gqa, { tp: 2, weights: [3, 1] });
  assert.equal(held(grouped, 0, 'model.layers.0.self_attn.v_proj.weight').slice, null);
  assert.deepEqual(held(grouped, 1, 'model.layers.0.self_attn.v_proj.weight').slice, {
    dim: 0,
    start: 8,
    length: 8,
  });
  await checkPlanBytes(gqa.dir, grouped);
  assert.throws(
    () => plan(llama, { tp: 2, weights: [3] }),
    (error) => isWeightcastError(error, 'PLAN_INVALID_OPTIONS'),
  );
});

test('pipeline stages: layers split as vLLM does, embeddings first, norm and lm_head last', async () => {
  const result = plan(llama, { tp: 2, pp: 2 });
  assert.equal(result.ranks.length, 4);
  const stage = (rank: number): string[] => result.ranks[rank]?.tensors.map((tensor) => tensor.name) ?? [];
  assert.deepEqual(result.ranks[0]?.layers, [0, 2]);
  assert.deepEqual(result.ranks[3]?.layers, [2, 3]);
  assert.ok(stage(1).includes('model.embed_tokens.weight'));
  assert.ok(!stage(1).includes('lm_head.weight') && !stage(1).includes('model.norm.weight'));
  assert.ok(stage(2).includes('lm_head.weight') && stage(3).includes('model.norm.weight'));
  assert.ok(!stage(2).includes('model.embed_tokens.weight'));
  assert.ok(
    stage(0).includes('model.layers.1.mlp.up_proj.weight') &&
      !stage(0).includes('model.layers.2.mlp.up_proj.weight'),
  );
  assert.equal(result.ranks[2]?.tpRank, 0);
  checkPlanTiles(result, names(llama));
  await checkPlanBytes(llama.dir, result);
  const three = plan(llama, { tp: 1, pp: 3 });
  assert.deepEqual(
    three.ranks.map((rank) => rank.layers),
    [
      [0, 1],
      [1, 2],
      [2, 3],
    ],
  );
  assert.throws(
    () => plan(llama, { tp: 1, pp: 4 }),
    (error) => isWeightcastError(error, 'PLAN_INVALID_OPTIONS'),
  );
});

test('Mistral with an explicit head_dim, Qwen2 biases and Qwen3 q/k norms with tied embeddings', async () => {
  const cases = [
    llamaLike({
      modelType: 'mistral',
      layers: 2,
      hidden: 64,
      heads: 4,
      kvHeads: 2,
      headDim: 24,
      intermediate: 128,
      vocab: 200,
    }),
    llamaLike({
      modelType: 'qwen2',
      layers: 2,
      hidden: 64,
      heads: 4,
      kvHeads: 2,
      headDim: 16,
      intermediate: 128,
      vocab: 200,
      bias: true,
    }),
    llamaLike({
      modelType: 'qwen3',
      layers: 2,
      hidden: 64,
      heads: 4,
      kvHeads: 2,
      headDim: 32,
      intermediate: 128,
      vocab: 200,
      qkNorm: true,
      tie: true,
    }),
  ];
  for (const [index, model] of cases.entries()) {
    const dir = join(root.path, `family-${index}`);
    await writeTinyModel(dir, model, `family-${index}`);
    const source = await readModelDirectory(dir);
    for (const options of [{ tp: 2 }, { tp: 4 }, { tp: 2, pp: 2 }] as const) {
      const result = plan(source, options);
      checkPlanTiles(result, names(source));
      await checkPlanBytes(dir, result);
    }
    const four = plan(source, { tp: 4 });
    const headDim = model.config['head_dim'] as number;
    assert.deepEqual(held(four, 3, 'model.layers.0.self_attn.q_proj.weight').slice, {
      dim: 0,
      start: 3 * headDim,
      length: headDim,
    });
    assert.deepEqual(held(four, 3, 'model.layers.0.self_attn.k_proj.weight').slice, {
      dim: 0,
      start: headDim,
      length: headDim,
    });
  }
  const qwen2 = plan(await readModelDirectory(join(root.path, 'family-1')), { tp: 2 });
  assert.deepEqual(held(qwen2, 1, 'model.layers.0.self_attn.q_proj.bias').slice, {
    dim: 0,
    start: 32,
    length: 32,
  });
  assert.deepEqual(held(qwen2, 1, 'model.layers.0.self_attn.v_proj.bias').slice, {
    dim: 0,
    start: 16,
    length: 16,
  });
  const qwen3 = plan(await readModelDirectory(join(root.path, 'family-2')), { tp: 2, pp: 2 });
  assert.equal(held(qwen3, 1, 'model.layers.0.self_attn.q_norm.weight').slice, null);
  // Tied embeddings: the last stage needs embed_tokens for its lm_head, as in vLLM.
  assert.ok(held(qwen3, 2, 'model.embed_tokens.weight').slice !== null);
});

test('unknown tensors fail with their names, or are replicated with a warning when asked', async () => {
  const dir = join(root.path, 'unknown');
  const model = llamaLike({
    modelType: 'llama',
    layers: 1,
    hidden: 32,
    heads: 2,
    kvHeads: 2,
    headDim: 16,
    intermediate: 64,
    vocab: 100,
    extra: [
      { name: 'model.layers.0.self_attn.mystery.weight', dtype: 'BF16', shape: [4, 4] },
      { name: 'vision_tower.patch_embed.weight', dtype: 'BF16', shape: [8] },
    ],
  });
  await writeTinyModel(dir, model);
  const source = await readModelDirectory(dir);
  assert.throws(
    () => plan(source, { tp: 2 }),
    (error) =>
      isWeightcastError(error, 'PLAN_UNKNOWN_TENSOR') &&
      /mystery/.test(error.message) &&
      (error.details['tensors'] as string[]).length === 2,
  );
  const result = plan(source, { tp: 2, unknownTensors: 'replicate' });
  assert.equal(result.warnings.length, 2);
  assert.equal(held(result, 1, 'vision_tower.patch_embed.weight').slice, null);
  await checkPlanBytes(dir, result);
  const badConfig = join(root.path, 'bad-config');
  await writeTinyModel(badConfig, { ...model, config: { ...model.config, model_type: 'gpt2' } });
  const unsupported = await readModelDirectory(badConfig).catch((error: unknown) => error);
  assert.ok(isWeightcastError(unsupported, 'PLAN_UNSUPPORTED_MODEL'));
});

test('per-tensor FP8 scales are replicated; packed shapes that disagree with the config are refused', async () => {
  const dir = join(root.path, 'llama-fp8');
  await synthesizeModel({
    dir,
    arch: 'llama',
    dtype: 'f8_e4m3',
    hidden: 128,
    heads: 8,
    layers: 1,
    vocab: 1000,
    seed: 2,
  });
  const source = await readModelDirectory(dir);
  const result = plan(source, { tp: 4 });
  assert.equal(held(result, 2, 'model.layers.0.self_attn.q_proj.weight_scale').slice, null);
  assert.deepEqual(held(result, 2, 'model.layers.0.self_attn.q_proj.weight').sliceShape, [32, 128]);
  await checkPlanBytes(dir, result, { hash: true });
  const lying = { ...source, model: { ...source.model, headDim: 32 } };
  assert.throws(
    () => plan(lying, { tp: 2 }),
    (error) => isWeightcastError(error, 'PLAN_SHAPE_MISMATCH'),
  );
});
