import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../src/errors.js';
import {
  SYNTH_ARCHS,
  SYNTH_DTYPES,
  deriveDims,
  modelTensorBytes,
  type DimChoices,
  type ModelDims,
  type SynthArch,
  type SynthDtype,
} from '../../src/synth/architectures.js';
import { planSynth } from '../../src/synth/plan.js';
import { SIZE_TOLERANCE, chooseDims } from '../../src/synth/sizing.js';
import { VOCAB_MIN } from '../../src/synth/tokenizer.js';

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

/**
 * The smallest model synth could make with these fixed dimensions: one layer, two experts, the
 * smallest vocab, the narrowest width (a fixed head count of llama and qwen2-moe sets a floor of
 * 2-wide heads), FP8 widths for one rank. A target more than the tolerance below it cannot be met.
 */
function smallestWith(arch: SynthArch, dtype: SynthDtype, fixed: Partial<DimChoices>): number {
  const floorHidden = fixed.heads !== undefined && arch !== 'deepseek-v3' ? 2 * fixed.heads : 64;
  const dims = deriveDims(arch, {
    hidden: fixed.hidden ?? floorHidden,
    layers: fixed.layers ?? 1,
    ...(fixed.heads === undefined ? {} : { heads: fixed.heads }),
    ...(arch === 'llama' ? {} : { experts: fixed.experts ?? 2 }),
    vocab: fixed.vocab ?? VOCAB_MIN,
  });
  return modelTensorBytes(dims, dtype);
}

test('fixed heads and layers: the size lands within the tolerance, or is refused only when out of reach', () => {
  let landed = 0;
  let refused = 0;
  for (const arch of SYNTH_ARCHS) {
    for (const dtype of SYNTH_DTYPES) {
      for (const mebibytes of [1, 64]) {
        for (const heads of [undefined, 3, 7, 40]) {
          for (const layers of [undefined, 2, 80]) {
            const targetBytes = mebibytes * MIB;
            const fixed: Partial<DimChoices> = {
              ...(heads === undefined ? {} : { heads }),
              ...(layers === undefined ? {} : { layers }),
            };
            const label = `${arch} ${dtype} ${mebibytes} MiB heads ${heads} layers ${layers}`;
            let dims: ModelDims;
            try {
              dims = chooseDims({ arch, dtype, targetBytes, fixed });
            } catch (error) {
              assert.ok(isWeightcastError(error, 'SYNTH_INVALID_OPTIONS'), label);
              const match = /the nearest model with those is ([\d.]+) (KiB|MiB|GiB)/.exec(error.message);
              assert.ok(match, `${label}: ${error.message}`);
              const unit = { KiB: 1024, MiB: MIB, GiB: 1024 * MIB }[match[2] as 'KiB' | 'MiB' | 'GiB'];
              const nearest = Number(match[1]) * unit;
              assert.ok(Math.abs(nearest - targetBytes) > SIZE_TOLERANCE * targetBytes, label);
              // Too large: even the smallest model with these dimensions is.
              if (nearest > targetBytes) {
                assert.ok(smallestWith(arch, dtype, fixed) > (1 + SIZE_TOLERANCE) * targetBytes, label);
              }
              refused++;
              continue;
            }
            const bytes = modelTensorBytes(dims, dtype);
            assert.ok(Math.abs(bytes - targetBytes) <= SIZE_TOLERANCE * targetBytes, `${label}: ${bytes}`);
            if (heads !== undefined) assert.equal(dims.heads, heads, label);
            if (layers !== undefined) assert.equal(dims.layers, layers, label);
            landed++;
          }
        }
      }
    }
  }
  // Most of the grid is reachable; the rest are 80 layers (or 40 heads) squeezed into 1 MiB.
  assert.ok(landed > 3 * refused, `${landed} landed, ${refused} refused`);
});

test('a head count that few usual widths divide still gets the size asked for', () => {
  // Was hidden 3584 (the only rung 7 heads of even width divide): 1.2 GB for 64 MiB.
  const plan = planSynth({ arch: 'llama', sizeBytes: 64 * MIB, heads: 7 });
  assert.equal(plan.dims.heads, 7);
  assert.ok(Math.abs(plan.tensorBytes - 64 * MIB) <= SIZE_TOLERANCE * 64 * MIB, String(plan.tensorBytes));
  assert.equal(plan.dims.arch === 'llama' && plan.dims.headDim, 64);
});

test('dimensions that cannot make the size are refused, saying the size they give', () => {
  assert.throws(
    () => planSynth({ arch: 'llama', hidden: 8192, layers: 80, sizeBytes: MIB }),
    (error) =>
      isWeightcastError(error, 'SYNTH_INVALID_OPTIONS') &&
      /within 10% of 1\.00 MiB with hidden 8192, layers 80: the nearest model with those is 127\.5 GiB/.test(
        error.message,
      ),
  );
  // Heads alone are sized to the default 64 MiB; a refusal says that size was not the user's.
  assert.throws(
    () => planSynth({ arch: 'llama', heads: 4096 }),
    (error) =>
      isWeightcastError(error, 'SYNTH_INVALID_OPTIONS') && /64 MiB is the default/.test(error.message),
  );
});

test('deepseek-v3 FP8 widths split in whole 128-blocks over 8 ranks once the size allows', () => {
  for (const mebibytes of [2, 16, 64, 1024, 100 * 1024]) {
    const dims = chooseDims({ arch: 'deepseek-v3', dtype: 'f8_e4m3', targetBytes: mebibytes * MIB });
    const label = `${mebibytes} MiB: ${JSON.stringify(dims)}`;
    assert.equal(dims.arch, 'deepseek-v3');
    if (dims.arch !== 'deepseek-v3') continue;
    assert.equal(dims.intermediate % (128 * 8), 0, label);
    assert.equal(dims.moeIntermediate % (128 * 8), 0, label);
    const headsPerRank = dims.heads / 8;
    assert.ok(Number.isInteger(headsPerRank), label);
    for (const width of [
      dims.qkNopeHeadDim + dims.qkRopeHeadDim,
      dims.qkNopeHeadDim + dims.vHeadDim,
      dims.vHeadDim,
    ]) {
      assert.equal((headsPerRank * width) % 128, 0, `${label}: heads of width ${width}`);
    }
  }
  // Below that, fewer ranks rather than a missed size; other dtypes keep their usual widths.
  const tiny = chooseDims({ arch: 'deepseek-v3', dtype: 'f8_e4m3', targetBytes: MIB / 2 });
  assert.ok(Math.abs(modelTensorBytes(tiny, 'f8_e4m3') - MIB / 2) <= (SIZE_TOLERANCE * MIB) / 2);
  const plain = chooseDims({ arch: 'deepseek-v3', dtype: 'bf16', targetBytes: 64 * MIB });
  assert.ok(plain.arch === 'deepseek-v3' && plain.moeIntermediate % 1024 !== 0);
});
