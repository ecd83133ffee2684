import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SYNTH_ARCHS, modelTensorBytes } from '../../src/synth/architectures.js';
import { chooseDims } from '../../src/synth/sizing.js';

const MIB = 1024 * 1024;

test('sizes from 1 MiB to 1 TiB land within 10% with realistic dimensions', () => {
  for (const arch of SYNTH_ARCHS) {
    for (const dtype of ['bf16', 'f8_e4m3'] as const) {
      for (const mebibytes of [1, 16, 64, 1024, 100 * 1024, 1024 * 1024]) {
        const targetBytes = mebibytes * MIB;
        const dims = chooseDims({ arch, dtype, targetBytes });
        const bytes = modelTensorBytes(dims, dtype);
        const label = `${arch} ${dtype} ${mebibytes} MiB: ${JSON.stringify(dims)}`;
        assert.ok(Math.abs(bytes - targetBytes) <= 0.1 * targetBytes, label);
        assert.equal(dims.hidden % 64, 0, label);
        assert.equal(dims.vocab % 64, 0, label);
        if (dims.arch !== 'deepseek-v3') {
          assert.ok(dims.headDim === 64 || dims.headDim === 128, label);
          assert.equal(dims.heads * dims.headDim, dims.hidden, label);
        }
      }
    }
  }
});

test('bigger targets give wider and deeper models', () => {
  const small = chooseDims({ arch: 'llama', dtype: 'bf16', targetBytes: 64 * MIB });
  const large = chooseDims({ arch: 'llama', dtype: 'bf16', targetBytes: 100 * 1024 * MIB });
  assert.ok(large.hidden > small.hidden && large.layers > small.layers);
});

test('fixed dimensions are kept and the others chosen around them', () => {
  const dims = chooseDims({
    arch: 'qwen2-moe',
    dtype: 'bf16',
    targetBytes: 256 * MIB,
    fixed: { layers: 3, experts: 10 },
  });
  assert.equal(dims.layers, 3);
  assert.equal(dims.arch === 'qwen2-moe' && dims.experts, 10);
  assert.ok(Math.abs(modelTensorBytes(dims, 'bf16') - 256 * MIB) <= 0.1 * 256 * MIB);
  const wide = chooseDims({ arch: 'llama', dtype: 'bf16', targetBytes: 64 * MIB, fixed: { hidden: 1024 } });
  assert.equal(wide.hidden, 1024);
});
