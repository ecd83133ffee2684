import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../src/errors.js';
import {
  deriveDims,
  modelConfig,
  modelTensorBytes,
  modelTensors,
  tensorByteSize,
  type SynthTensor,
} from '../../src/synth/architectures.js';
import { planSynth } from '../../src/synth/plan.js';

function shapes(tensors: SynthTensor[]): Map<string, SynthTensor> {
  return new Map(tensors.map((tensor) => [tensor.name, tensor]));
}

function shapeOf(tensors: Map<string, SynthTensor>, name: string): number[] {
  const tensor = tensors.get(name);
  assert.ok(tensor, `missing tensor ${name}`);
  return tensor.shape;
}

const num = (config: Record<string, unknown>, key: string): number => {
  const value = config[key];
  assert.equal(typeof value, 'number', `config.${key}`);
  return value as number;
};

test('llama: config fields and tensor shapes agree', () => {
  const dims = deriveDims('llama', { hidden: 256, layers: 2 });
  const config = modelConfig(dims, 'bf16');
  const tensors = shapes(modelTensors(dims, 'bf16'));
  assert.deepEqual(config['architectures'], ['LlamaForCausalLM']);
  assert.equal(config['model_type'], 'llama');
  assert.equal(config['torch_dtype'], 'bfloat16');
  const hidden = num(config, 'hidden_size');
  const heads = num(config, 'num_attention_heads');
  const kvHeads = num(config, 'num_key_value_heads');
  const headDim = num(config, 'head_dim');
  assert.equal(heads * headDim, hidden);
  assert.ok(headDim === 64 || headDim === 128);
  assert.equal(heads % kvHeads, 0);
  assert.deepEqual(shapeOf(tensors, 'model.embed_tokens.weight'), [num(config, 'vocab_size'), hidden]);
  assert.deepEqual(shapeOf(tensors, 'lm_head.weight'), [num(config, 'vocab_size'), hidden]);
  const last = num(config, 'num_hidden_layers') - 1;
  assert.deepEqual(shapeOf(tensors, `model.layers.${last}.self_attn.k_proj.weight`), [
    kvHeads * headDim,
    hidden,
  ]);
  assert.deepEqual(shapeOf(tensors, `model.layers.${last}.self_attn.o_proj.weight`), [
    hidden,
    heads * headDim,
  ]);
  assert.deepEqual(shapeOf(tensors, 'model.layers.0.mlp.down_proj.weight'), [
    hidden,
    num(config, 'intermediate_size'),
  ]);
  assert.deepEqual(shapeOf(tensors, 'model.layers.0.post_attention_layernorm.weight'), [hidden]);
  assert.equal(tensors.has(`model.layers.${last + 1}.input_layernorm.weight`), false);
  assert.equal(tensors.size, 2 + 9 * 2 + 1);
});

test('qwen2-moe: router, experts, shared expert and biases agree with the config', () => {
  const dims = deriveDims('qwen2-moe', { hidden: 128, layers: 2, experts: 6 });
  const config = modelConfig(dims, 'bf16');
  const tensors = shapes(modelTensors(dims, 'bf16'));
  assert.deepEqual(config['architectures'], ['Qwen2MoeForCausalLM']);
  assert.equal(config['model_type'], 'qwen2_moe');
  const hidden = num(config, 'hidden_size');
  const experts = num(config, 'num_experts');
  assert.equal(experts, 6);
  assert.ok(num(config, 'num_experts_per_tok') <= experts);
  assert.equal(num(config, 'decoder_sparse_step'), 1);
  assert.equal(config['norm_topk_prob'], false);
  assert.equal(hidden % num(config, 'num_attention_heads'), 0);
  const moe = num(config, 'moe_intermediate_size');
  const shared = num(config, 'shared_expert_intermediate_size');
  const layer = 'model.layers.1';
  assert.deepEqual(shapeOf(tensors, `${layer}.mlp.gate.weight`), [experts, hidden]);
  assert.deepEqual(shapeOf(tensors, `${layer}.mlp.experts.${experts - 1}.gate_proj.weight`), [moe, hidden]);
  assert.deepEqual(shapeOf(tensors, `${layer}.mlp.experts.0.down_proj.weight`), [hidden, moe]);
  assert.equal(tensors.has(`${layer}.mlp.experts.${experts}.up_proj.weight`), false);
  assert.deepEqual(shapeOf(tensors, `${layer}.mlp.shared_expert.up_proj.weight`), [shared, hidden]);
  assert.deepEqual(shapeOf(tensors, `${layer}.mlp.shared_expert_gate.weight`), [1, hidden]);
  assert.deepEqual(shapeOf(tensors, `${layer}.self_attn.q_proj.bias`), [hidden]);
  assert.deepEqual(shapeOf(tensors, `${layer}.self_attn.v_proj.bias`), [
    num(config, 'num_key_value_heads') * (hidden / num(config, 'num_attention_heads')),
  ]);
  assert.equal(tensors.has(`${layer}.self_attn.o_proj.bias`), false);
});

test('deepseek-v3: MLA projections, dense then MoE layers, block-wise FP8 scales', () => {
  const dims = deriveDims('deepseek-v3', { hidden: 256, layers: 5, experts: 8 });
  const config = modelConfig(dims, 'f8_e4m3');
  const tensors = shapes(modelTensors(dims, 'f8_e4m3'));
  assert.deepEqual(config['architectures'], ['DeepseekV3ForCausalLM']);
  assert.equal(config['model_type'], 'deepseek_v3');
  assert.deepEqual(config['quantization_config'], {
    activation_scheme: 'dynamic',
    fmt: 'e4m3',
    quant_method: 'fp8',
    weight_block_size: [128, 128],
  });
  const hidden = num(config, 'hidden_size');
  const heads = num(config, 'num_attention_heads');
  const qLora = num(config, 'q_lora_rank');
  const kvLora = num(config, 'kv_lora_rank');
  const nope = num(config, 'qk_nope_head_dim');
  const rope = num(config, 'qk_rope_head_dim');
  const vHead = num(config, 'v_head_dim');
  const experts = num(config, 'n_routed_experts');
  const dense = num(config, 'first_k_dense_replace');
  assert.equal(dense, 1);
  assert.equal(experts % num(config, 'n_group'), 0);
  assert.ok(num(config, 'topk_group') <= num(config, 'n_group'));
  const attention = 'model.layers.0.self_attn';
  assert.deepEqual(shapeOf(tensors, `${attention}.q_a_proj.weight`), [qLora, hidden]);
  assert.deepEqual(shapeOf(tensors, `${attention}.q_a_layernorm.weight`), [qLora]);
  assert.deepEqual(shapeOf(tensors, `${attention}.q_b_proj.weight`), [heads * (nope + rope), qLora]);
  assert.deepEqual(shapeOf(tensors, `${attention}.kv_a_proj_with_mqa.weight`), [kvLora + rope, hidden]);
  assert.deepEqual(shapeOf(tensors, `${attention}.kv_a_layernorm.weight`), [kvLora]);
  assert.deepEqual(shapeOf(tensors, `${attention}.kv_b_proj.weight`), [heads * (nope + vHead), kvLora]);
  assert.deepEqual(shapeOf(tensors, `${attention}.o_proj.weight`), [hidden, heads * vHead]);
  const kvA = tensors.get(`${attention}.kv_a_proj_with_mqa.weight_scale_inv`);
  assert.deepEqual(kvA?.shape, [Math.ceil((kvLora + rope) / 128), Math.ceil(hidden / 128)]);
  assert.equal(kvA?.dtype, 'F32');
  assert.equal(tensors.get(`${attention}.q_a_proj.weight`)?.dtype, 'F8_E4M3');
  assert.deepEqual(shapeOf(tensors, 'model.layers.0.mlp.gate_proj.weight'), [
    num(config, 'intermediate_size'),
    hidden,
  ]);
  assert.equal(tensors.has('model.layers.0.mlp.gate.weight'), false);
  const moe = 'model.layers.1.mlp';
  assert.deepEqual(shapeOf(tensors, `${moe}.gate.weight`), [experts, hidden]);
  assert.equal(tensors.get(`${moe}.gate.weight`)?.dtype, 'BF16');
  assert.equal(tensors.get(`${moe}.gate.e_score_correction_bias`)?.dtype, 'F32');
  assert.deepEqual(shapeOf(tensors, `${moe}.experts.7.down_proj.weight`), [
    hidden,
    num(config, 'moe_intermediate_size'),
  ]);
  assert.deepEqual(shapeOf(tensors, `${moe}.shared_experts.up_proj.weight`), [
    num(config, 'moe_intermediate_size') * num(config, 'n_shared_experts'),
    hidden,
  ]);
  assert.equal(tensors.get('model.embed_tokens.weight')?.dtype, 'BF16');
  assert.equal(tensors.get('lm_head.weight')?.dtype, 'BF16');
  assert.equal(tensors.get('model.norm.weight')?.dtype, 'BF16');
});

test('llama and qwen2-moe in fp8 carry a per-tensor F32 weight_scale next to each linear weight', () => {
  for (const arch of ['llama', 'qwen2-moe'] as const) {
    const tensors = modelTensors(deriveDims(arch, { hidden: 128, layers: 1 }), 'f8_e4m3');
    const byName = shapes(tensors);
    for (const tensor of tensors.filter((t) => t.dtype === 'F8_E4M3')) {
      const scale = byName.get(`${tensor.name}_scale`);
      assert.deepEqual(scale?.shape, [], tensor.name);
      assert.equal(scale?.dtype, 'F32');
      assert.equal(tensors.indexOf(scale), tensors.indexOf(tensor) + 1);
    }
    assert.equal(byName.get('lm_head.weight')?.dtype, 'BF16');
    assert.ok(tensors.some((t) => t.dtype === 'F8_E4M3'));
  }
});

test('modelTensorBytes agrees with the full tensor list', () => {
  const cases = [
    deriveDims('llama', { hidden: 192, layers: 3 }),
    deriveDims('qwen2-moe', { hidden: 128, layers: 2, experts: 4 }),
    deriveDims('deepseek-v3', { hidden: 128, layers: 6, experts: 4 }),
    // Sizing counts a layer of any expert count from layers of one and two experts.
    deriveDims('qwen2-moe', { hidden: 64, layers: 1, experts: 61 }),
    deriveDims('deepseek-v3', { hidden: 64, layers: 5, experts: 37, fp8SplitRanks: 8 }),
  ];
  for (const dims of cases) {
    for (const dtype of ['bf16', 'f32', 'f8_e4m3'] as const) {
      const listed = modelTensors(dims, dtype).reduce((sum, tensor) => sum + tensorByteSize(tensor), 0);
      assert.equal(modelTensorBytes(dims, dtype), listed, `${dims.arch} ${dtype}`);
    }
  }
});

test('deepseek-v3 widths for FP8 split over tensor-parallel ranks on whole 128-blocks', () => {
  for (const hidden of [64, 256, 1024, 7168]) {
    for (const fp8SplitRanks of [2, 4, 8]) {
      const dims = deriveDims('deepseek-v3', { hidden, layers: 4, experts: 4, fp8SplitRanks });
      const label = `hidden ${hidden}, ${fp8SplitRanks} ranks: ${JSON.stringify(dims)}`;
      assert.ok(dims.arch === 'deepseek-v3');
      assert.equal(dims.intermediate % (128 * fp8SplitRanks), 0, label);
      assert.equal(dims.moeIntermediate % (128 * fp8SplitRanks), 0, label);
      assert.equal(dims.heads % fp8SplitRanks, 0, label);
      const headsPerRank = dims.heads / fp8SplitRanks;
      for (const width of [
        dims.qkNopeHeadDim + dims.qkRopeHeadDim,
        dims.qkNopeHeadDim + dims.vHeadDim,
        dims.vHeadDim,
      ]) {
        assert.equal((headsPerRank * width) % 128, 0, `${label}: heads of width ${width}`);
      }
    }
  }
  // DeepSeek-V3's own widths already split over 8: nothing grows.
  const real = deriveDims('deepseek-v3', { hidden: 7168, layers: 4, experts: 4 });
  const split = deriveDims('deepseek-v3', { hidden: 7168, layers: 4, experts: 4, fp8SplitRanks: 8 });
  assert.deepEqual(split, real);
  // A head count the user gives is kept.
  const given = deriveDims('deepseek-v3', { hidden: 256, layers: 1, heads: 3, fp8SplitRanks: 8 });
  assert.equal(given.heads, 3);
});

test('bad options are SYNTH_INVALID_OPTIONS with a clear message', () => {
  const expectInvalid = (action: () => unknown, pattern: RegExp): void => {
    assert.throws(
      action,
      (error) => isWeightcastError(error, 'SYNTH_INVALID_OPTIONS') && pattern.test(error.message),
    );
  };
  expectInvalid(() => deriveDims('llama', { hidden: 100, layers: 2, heads: 3 }), /not divisible by heads/);
  expectInvalid(() => deriveDims('llama', { hidden: 100, layers: 2 }), /multiple of 64/);
  expectInvalid(() => deriveDims('llama', { hidden: 128, layers: 2, experts: 4 }), /no experts/);
  expectInvalid(() => deriveDims('qwen2-moe', { hidden: 128, layers: 0 }), /layers/);
  expectInvalid(() => deriveDims('qwen2-moe', { hidden: 128, layers: 1, experts: 1 }), /experts/);
  expectInvalid(
    () => deriveDims('deepseek-v3', { hidden: 128, layers: 1, fp8SplitRanks: 3 }),
    /fp8SplitRanks must be 1, 2, 4 or 8/,
  );
  expectInvalid(() => planSynth({ arch: 'gpt2' as 'llama' }), /unknown arch/);
  expectInvalid(() => planSynth({ dtype: 'int4' as 'bf16' }), /unknown dtype/);
  expectInvalid(() => planSynth({ arch: 'llama', experts: 8 }), /no experts/);
  expectInvalid(() => planSynth({ seed: -1 }), /seed/);
  expectInvalid(() => planSynth({ hidden: 128, layers: 1, shards: 1000 }), /shards/);
});
