/**
 * The pure planning of pre-sharding: output names and shapes per layout, read units (fused parts read
 * together, whatever lies between them joining the unit, parts in different files staged), the memory
 * check. (That every module but the I/O shell is pure: test/tidy.test.ts.)
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../../src/errors.js';
import { DTYPE_BITS } from '../../../src/format/dtype.js';
import { buildParallelPlan } from '../../../src/loader/plan/build.js';
import { readPlanModel } from '../../../src/loader/plan/model-config.js';
import type { SourceTensor } from '../../../src/loader/plan/types.js';
import { planPreshardLayout, type LayoutOptions } from '../../../src/loader/preshard/layout.js';
import { fusionPartName, fusionTarget, isQuantisableName } from '../../../src/loader/preshard/naming.js';
import { checkMemory, planReadUnits } from '../../../src/loader/preshard/units.js';
import { llamaLike } from '../plan/helpers.js';

const tiny = llamaLike({
  modelType: 'llama',
  layers: 1,
  hidden: 64,
  heads: 4,
  kvHeads: 2,
  headDim: 16,
  intermediate: 128,
  vocab: 256,
});
const model = readPlanModel(tiny.config);

/** The tiny model's tensors laid out in one or two files, in the given name order. */
function sources(
  order: (a: string, b: string) => number,
  fileOf: (name: string) => string = () => 'a.safetensors',
): SourceTensor[] {
  const offsets = new Map<string, number>();
  return [...tiny.tensors]
    .sort((a, b) => order(a.name, b.name))
    .map((spec) => {
      const file = fileOf(spec.name);
      const start = offsets.get(file) ?? 64;
      const end =
        start + (spec.shape.reduce((product, size) => product * size, 1) * DTYPE_BITS[spec.dtype]) / 8;
      offsets.set(file, end);
      return { name: spec.name, file, dtype: spec.dtype, shape: spec.shape, start, end };
    });
}

const alphabetical = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

function layoutOf(
  tensors: SourceTensor[],
  options: LayoutOptions,
  tp = 2,
): ReturnType<typeof planPreshardLayout> {
  return planPreshardLayout(buildParallelPlan({ tensors, model }, { tp }), model, tensors, options);
}

test('names: fusion targets and parts, routed experts unfused, what FP8 quantises', () => {
  assert.deepEqual(fusionTarget('model.layers.3.self_attn.k_proj.bias'), {
    name: 'model.layers.3.self_attn.qkv_proj.bias',
    index: 1,
    parts: 3,
  });
  assert.deepEqual(fusionTarget('model.layers.0.mlp.shared_expert.up_proj.weight'), {
    name: 'model.layers.0.mlp.shared_expert.gate_up_proj.weight',
    index: 1,
    parts: 2,
  });
  assert.equal(fusionTarget('model.layers.0.mlp.experts.7.gate_proj.weight'), undefined);
  assert.equal(fusionTarget('model.layers.0.self_attn.o_proj.weight'), undefined);
  assert.equal(
    fusionPartName('model.layers.0.mlp.gate_up_proj.weight', 0),
    'model.layers.0.mlp.gate_proj.weight',
  );
  assert.ok(isQuantisableName('model.layers.0.self_attn.kv_a_proj_with_mqa.weight'));
  assert.ok(isQuantisableName('model.layers.2.mlp.experts.5.down_proj.weight'));
  for (const name of [
    'model.layers.0.mlp.gate.weight',
    'model.layers.0.mlp.shared_expert_gate.weight',
    'model.layers.0.self_attn.q_proj.bias',
    'model.layers.0.input_layernorm.weight',
    'model.embed_tokens.weight',
    'lm_head.weight',
  ]) {
    assert.ok(!isQuantisableName(name), name);
  }
});

test('vllm layout: stacked shapes per rank, padded vocabulary, FP8 scales after their weights', () => {
  const layout = layoutOf(sources(alphabetical), { layout: 'vllm', quantize: 'fp8' });
  const rank = layout.ranks[1];
  assert.ok(rank);
  const byName = new Map(rank.tensors.map((tensor) => [tensor.name, tensor]));
  // 2 query heads and 1 KV head of 16 per rank: 32 + 16 + 16 rows.
  const qkv = byName.get('model.layers.0.self_attn.qkv_proj.weight');
  assert.deepEqual(qkv?.shape, [64, 64]);
  assert.deepEqual(
    qkv?.components.map((component) => [
      component.source.split('.').at(-2),
      component.row,
      component.slice?.start,
    ]),
    [
      ['q_proj', 0, 32],
      ['k_proj', 32, 16],
      ['v_proj', 48, 16],
    ],
  );
  assert.equal(qkv?.dtype, 'F8_E4M3');
  const names = rank.tensors.map((tensor) => tensor.name);
  assert.equal(
    names[names.indexOf('model.layers.0.self_attn.qkv_proj.weight') + 1],
    'model.layers.0.self_attn.qkv_proj.weight_scale',
  );
  assert.deepEqual(byName.get('model.layers.0.mlp.gate_up_proj.weight')?.shape, [128, 64]);
  assert.deepEqual(byName.get('model.embed_tokens.weight')?.shape, [128, 64]);
  assert.equal(byName.get('model.embed_tokens.weight')?.dtype, 'BF16');
  assert.deepEqual(byName.get('model.layers.0.self_attn.o_proj.weight_scale')?.shape, []);
});

test('read units: fused parts read as one range with whatever lies between; parts in two files are staged', () => {
  const layout = layoutOf(sources(alphabetical), { layout: 'vllm', quantize: 'none' });
  const units = planReadUnits(layout);
  assert.equal(units.staged.length, 0);
  const attention = units.streamed.find((unit) =>
    unit.tensors.some((tensor) => tensor.name.endsWith('q_proj.weight')),
  );
  // Checkpoint order puts o_proj between k_proj and q_proj: it joins the unit.
  assert.deepEqual(
    attention?.tensors.map((tensor) => tensor.name.split('.').at(-2)),
    ['k_proj', 'o_proj', 'q_proj', 'v_proj'],
  );
  const mlp = units.streamed.find((unit) =>
    unit.tensors.some((tensor) => tensor.name.endsWith('gate_proj.weight')),
  );
  assert.deepEqual(
    mlp?.tensors.map((tensor) => tensor.name.split('.').at(-2)),
    ['gate_proj', 'up_proj'],
  );
  // hf needs no unit larger than a tensor.
  const plain = planReadUnits(layoutOf(sources(alphabetical), { layout: 'hf', quantize: 'fp8' }));
  assert.ok(plain.streamed.every((unit) => unit.tensors.length === 1));
  // q_proj alone in a second file: the attention parts are staged.
  const split = layoutOf(
    sources(alphabetical, (name) => (name.endsWith('q_proj.weight') ? 'b.safetensors' : 'a.safetensors')),
    { layout: 'vllm', quantize: 'none' },
  );
  const staged = planReadUnits(split);
  assert.equal(staged.staged.length, 1);
  assert.deepEqual(
    staged.staged[0]?.tensors.map((tensor) => tensor.name.split('.').at(-2)),
    ['k_proj', 'v_proj', 'q_proj'],
  );
});

test('memory: scratch for the largest built output, read buffer for the largest unit, typed error past the budget', () => {
  const layout = layoutOf(sources(alphabetical), { layout: 'vllm', quantize: 'fp8' });
  const units = planReadUnits(layout);
  const plan = checkMemory(layout, units, 1024 * 1024);
  // The largest unit is embed_tokens (256 x 64 BF16; the attention unit k, o, q, v is 192 x 64). The
  // largest output built outside the read buffer is a rank's gate_up_proj codes (128 x 64) and scale.
  assert.equal(plan.largestUnitBytes, 256 * 64 * 2);
  assert.equal(plan.scratchBytes, 128 * 64 + 4);
  assert.equal(plan.streamBytes, 1024 * 1024 - plan.scratchBytes);
  assert.throws(
    () => checkMemory(layout, units, plan.largestUnitBytes + plan.scratchBytes - 1),
    (error) => isWeightcastError(error, 'LOADER_TENSOR_TOO_LARGE'),
  );
  checkMemory(layout, units, plan.largestUnitBytes + plan.scratchBytes);
});
