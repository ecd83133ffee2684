import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { decodeBf16, decodeE4m3, decodeF16, isE4m3Nan } from '../../src/format/float-bits.js';
import { FP8_VALUE_MAX, SEGMENT_BYTES, ValueGenerator, type ValueSource } from '../../src/synth/values.js';

const MIB = 1024 * 1024;
const weight = (dtype: ValueSource['dtype'], name = 'model.layers.0.mlp.up_proj.weight'): ValueSource => ({
  name,
  dtype,
  role: 'weight',
});

function generate(seed: number, source: ValueSource, length: number, offset = 0): Buffer {
  const out = Buffer.alloc(length);
  new ValueGenerator(seed).fill(out, source, offset);
  return out;
}

function decode(bytes: Buffer, dtype: ValueSource['dtype']): number[] {
  const values: number[] = [];
  if (dtype === 'F8_E4M3') for (const byte of bytes) values.push(decodeE4m3(byte));
  else if (dtype === 'F32') for (let i = 0; i < bytes.length; i += 4) values.push(bytes.readFloatLE(i));
  else {
    const decode16 = dtype === 'BF16' ? decodeBf16 : decodeF16;
    for (let i = 0; i < bytes.length; i += 2) values.push(decode16(bytes.readUInt16LE(i)));
  }
  return values;
}

function stats(values: number[]): { mean: number; std: number; min: number; max: number } {
  const mean = values.reduce((sum, value) => sum + value, 0) / values.length;
  const variance = values.reduce((sum, value) => sum + (value - mean) ** 2, 0) / values.length;
  const min = values.reduce((a, b) => Math.min(a, b), Infinity);
  const max = values.reduce((a, b) => Math.max(a, b), -Infinity);
  return { mean, std: Math.sqrt(variance), min, max };
}

test('the same seed gives the same bytes; another seed or tensor gives different bytes', () => {
  const a = generate(7, weight('BF16'), 300_000);
  assert.deepEqual(generate(7, weight('BF16'), 300_000), a);
  assert.notDeepEqual(generate(8, weight('BF16'), 300_000), a);
  assert.notDeepEqual(generate(7, weight('BF16', 'model.layers.1.mlp.up_proj.weight'), 300_000), a);
});

test('bytes depend on the position in the tensor, not on how the caller chunks it', () => {
  const whole = generate(3, weight('F8_E4M3'), 3 * SEGMENT_BYTES + 1000);
  const generator = new ValueGenerator(3);
  const pieces = Buffer.alloc(whole.length);
  // Odd cut points exercise the byte-wise path as well as the word-wise one.
  const cuts = [0, 1, 4097, SEGMENT_BYTES - 3, SEGMENT_BYTES + 8, 2 * SEGMENT_BYTES + 6, whole.length];
  for (let i = 0; i + 1 < cuts.length; i++) {
    generator.fill(pieces.subarray(cuts[i], cuts[i + 1]), weight('F8_E4M3'), cuts[i] ?? 0);
  }
  assert.deepEqual(pieces, whole);
  assert.deepEqual(generate(3, weight('F8_E4M3'), 5000, 70_000), whole.subarray(70_000, 75_000));
});

test('no two 1 MiB regions of a tensor are identical, nor any two 64 KiB segments', () => {
  const bytes = generate(0, weight('BF16'), 8 * MIB);
  const digests = new Set<string>();
  for (let offset = 0; offset < bytes.length; offset += SEGMENT_BYTES) {
    digests.add(
      createHash('sha256')
        .update(bytes.subarray(offset, offset + SEGMENT_BYTES))
        .digest('hex'),
    );
  }
  assert.equal(digests.size, bytes.length / SEGMENT_BYTES);
});

test('float weights are finite and look like N(0, 0.02)', () => {
  for (const dtype of ['BF16', 'F16', 'F32'] as const) {
    const { mean, std, min, max } = stats(decode(generate(1, weight(dtype), 400_000), dtype));
    assert.ok(Number.isFinite(min) && Number.isFinite(max), dtype);
    assert.ok(Math.abs(mean) < 0.002, `${dtype} mean ${mean}`);
    assert.ok(std > 0.015 && std < 0.025, `${dtype} std ${std}`);
  }
});

test('fp8 weights never use the E4M3 NaN pattern and stay within the pool range', () => {
  const bytes = generate(5, weight('F8_E4M3'), 2 * MIB, 12_345);
  assert.equal(bytes.findIndex(isE4m3Nan), -1);
  const { std, min, max } = stats(decode(bytes.subarray(0, 200_000), 'F8_E4M3'));
  assert.ok(min >= -FP8_VALUE_MAX && max <= FP8_VALUE_MAX);
  assert.ok(std > 20, `std ${std}`);
});

test('norms sit near 1 and scales are positive and finite', () => {
  const norms = stats(decode(generate(2, { name: 'n', dtype: 'BF16', role: 'norm' }, 20_000), 'BF16'));
  assert.ok(Math.abs(norms.mean - 1) < 0.05 && norms.min > 0.5 && norms.max < 1.5, JSON.stringify(norms));
  const scales = decode(generate(2, { name: 's', dtype: 'F32', role: 'scale' }, 20_000), 'F32');
  assert.ok(scales.every((scale) => Number.isFinite(scale) && scale > 0));
});
