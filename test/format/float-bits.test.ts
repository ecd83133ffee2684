import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  decodeBf16,
  decodeE4m3,
  decodeF16,
  encodeBf16,
  encodeE4m3,
  encodeF16,
  isE4m3Nan,
} from '../../src/format/float-bits.js';

test('bf16 encodes known values and rounds to nearest even', () => {
  assert.equal(encodeBf16(1), 0x3f80);
  assert.equal(encodeBf16(-2), 0xc000);
  assert.equal(encodeBf16(0.02), 0x3ca4);
  assert.equal(decodeBf16(0x3f80), 1);
  // 1 + 2^-8 lies exactly between two bf16 values; the even one (1.0) wins.
  assert.equal(encodeBf16(1 + 2 ** -8), 0x3f80);
});

test('f16 encodes normals, subnormals and saturates to infinity', () => {
  assert.equal(encodeF16(1), 0x3c00);
  assert.equal(encodeF16(65504), 0x7bff);
  assert.equal(encodeF16(1e6), 0x7c00);
  assert.equal(encodeF16(2 ** -24), 0x0001);
  for (const value of [0.02, -0.0173, 1.05, 3e-5]) {
    assert.ok(Math.abs(decodeF16(encodeF16(value)) - value) <= Math.abs(value) * 2 ** -10);
  }
});

test('e4m3 encodes the fn variant: max 448, subnormals, never NaN for finite input', () => {
  assert.equal(encodeE4m3(448), 0x7e);
  assert.equal(encodeE4m3(1e9), 0x7e);
  assert.equal(encodeE4m3(240), 0x77);
  assert.equal(encodeE4m3(-1), 0xb8);
  assert.equal(encodeE4m3(2 ** -9), 0x01);
  assert.ok(Number.isNaN(decodeE4m3(0x7f)));
  for (let bits = 0; bits < 256; bits++) {
    if (isE4m3Nan(bits)) continue;
    const value = decodeE4m3(bits);
    assert.equal(isE4m3Nan(encodeE4m3(value)), false);
    assert.equal(decodeE4m3(encodeE4m3(value)), value, `bits ${bits}`);
  }
});
