/**
 * FP8 E4M3 numerics: known codes (zero, subnormals, 448, saturation, NaN, ties to even), agreement
 * with the synthesiser's independent encoder over many values, scales, and dequantisation error.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AMAX_MIN,
  amaxOf,
  decodeE4m3,
  elementReader,
  encodeE4m3,
  quantiseBlocks,
  scaleFor,
} from '../../../src/loader/preshard/fp8.js';
import { encodeBf16, encodeE4m3 as referenceEncode } from '../../../src/format/float-bits.js';

test('known values: zero, subnormals, normals, 448, saturation, NaN', () => {
  const cases: Array<[number, number]> = [
    [0, 0x00],
    [-0, 0x80],
    [2 ** -9, 0x01], // smallest subnormal
    [-(2 ** -9), 0x81],
    [7 * 2 ** -9, 0x07], // largest subnormal
    [2 ** -6, 0x08], // smallest normal
    [1, 0x38],
    [-1, 0xb8],
    [1.125, 0x39],
    [2, 0x40],
    [416, 0x7d],
    [448, 0x7e],
    [-448, 0xfe],
    [449, 0x7e], // saturates, never NaN
    [1e6, 0x7e],
    [-1e6, 0xfe],
    [Infinity, 0x7e],
    [-Infinity, 0xfe],
    [2 ** -12, 0x00], // underflows to zero
  ];
  for (const [value, code] of cases) {
    assert.equal(encodeE4m3(value), code, `encode(${value})`);
  }
  assert.equal(encodeE4m3(NaN) & 0x7f, 0x7f, 'NaN stays NaN');
  assert.ok(Number.isNaN(decodeE4m3(0x7f)) && Number.isNaN(decodeE4m3(0xff)));
  assert.equal(decodeE4m3(0x7e), 448);
  assert.equal(decodeE4m3(0x01), 2 ** -9);
});

test('ties round to even: subnormal, normal and across an exponent boundary', () => {
  assert.equal(encodeE4m3(2 ** -10), 0x00, 'half the smallest subnormal goes to 0 (even)');
  assert.equal(encodeE4m3(3 * 2 ** -10), 0x02, '1.5 subnormal steps go to 2 (even)');
  assert.equal(encodeE4m3(5 * 2 ** -10), 0x02, '2.5 subnormal steps go to 2 (even)');
  assert.equal(encodeE4m3(1.0625), 0x38, 'between 1 and 1.125: to 1 (even mantissa)');
  assert.equal(encodeE4m3(1.1875), 0x3a, 'between 1.125 and 1.25: to 1.25 (even mantissa)');
  assert.equal(encodeE4m3(1.9375), 0x40, 'between 1.875 and 2: carries into the exponent');
  assert.equal(encodeE4m3(432), 0x7e, 'between 416 and 448: to 448 (even)');
  assert.equal(encodeE4m3(15 * 2 ** -10), 0x08, 'between the largest subnormal and the smallest normal');
  // Every midpoint between neighbouring codes goes to the one with the even code.
  for (let code = 0; code < 0x7e; code++) {
    const middle = (decodeE4m3(code) + decodeE4m3(code + 1)) / 2;
    const even = code % 2 === 0 ? code : code + 1;
    assert.equal(encodeE4m3(middle), even, `midpoint after code ${code}`);
    assert.equal(encodeE4m3(-middle), 0x80 | even, `negative midpoint after code ${code}`);
  }
});

test('every finite code round-trips, and the fast encoder agrees with the reference encoder', () => {
  for (let code = 0; code < 256; code++) {
    if ((code & 0x7f) === 0x7f) continue;
    assert.equal(encodeE4m3(decodeE4m3(code)), code, `code ${code}`);
  }
  let state = 12345;
  const random = (): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 2 ** 32;
  };
  for (let index = 0; index < 20000; index++) {
    const value = Math.fround((random() - 0.5) * 2 ** (random() * 24 - 14));
    assert.equal(encodeE4m3(value), referenceEncode(value), `value ${value}`);
  }
});

test('scales: amax / 448 in float32, clamped away from zero; amax ignores NaN and infinities', () => {
  assert.equal(scaleFor(448), 1);
  assert.equal(scaleFor(0), Math.fround(AMAX_MIN / 448));
  assert.equal(scaleFor(1), Math.fround(1 / 448));
  const values = [0.5, -3, NaN, Infinity, 2];
  const bytes = new Uint8Array(values.length * 4);
  const view = new DataView(bytes.buffer);
  values.forEach((value, index) => view.setFloat32(index * 4, value, true));
  assert.equal(amaxOf(elementReader(bytes, 'F32'), 0, values.length), 3);
});

test('block quantisation: one scale per 128x128 block (partial blocks at the edges), values within FP8 error', () => {
  const rows = 130;
  const columns = 260;
  const bytes = new Uint8Array(rows * columns * 2);
  const view = new DataView(bytes.buffer);
  const values: number[] = [];
  for (let index = 0; index < rows * columns; index++) {
    const row = Math.floor(index / columns);
    const column = index % columns;
    // Blocks of very different magnitudes, so a shared scale would be visibly wrong.
    const magnitude = 2 ** (Math.floor(row / 128) * 3 + Math.floor(column / 128) - 4);
    const bits = encodeBf16(Math.sin(index) * magnitude);
    view.setUint16(index * 2, bits, true);
    values.push(new Float32Array(new Uint32Array([bits << 16]).buffer)[0] ?? 0);
  }
  const codes = new Uint8Array(rows * columns);
  const scales = new Uint8Array(2 * 3 * 4);
  quantiseBlocks(
    { read: elementReader(bytes, 'BF16'), rows, columns, origin: 0, rowStride: columns },
    codes,
    scales,
  );
  const scaleView = new DataView(scales.buffer);
  for (let blockRow = 0; blockRow < 2; blockRow++) {
    for (let blockColumn = 0; blockColumn < 3; blockColumn++) {
      let amax = 0;
      for (let row = blockRow * 128; row < Math.min(rows, blockRow * 128 + 128); row++) {
        for (let column = blockColumn * 128; column < Math.min(columns, blockColumn * 128 + 128); column++) {
          amax = Math.max(amax, Math.abs(values[row * columns + column] ?? 0));
        }
      }
      const scale = scaleView.getFloat32((blockRow * 3 + blockColumn) * 4, true);
      assert.equal(scale, Math.fround(amax / 448), `block ${blockRow},${blockColumn}`);
    }
  }
  for (let index = 0; index < rows * columns; index++) {
    const row = Math.floor(index / columns);
    const column = index % columns;
    const scale = scaleView.getFloat32((Math.floor(row / 128) * 3 + Math.floor(column / 128)) * 4, true);
    const value = values[index] ?? 0;
    const restored = decodeE4m3(codes[index] ?? 0) * scale;
    assert.ok(
      Math.abs(restored - value) <= Math.abs(value) * 2 ** -4 + scale * 2 ** -10,
      `element ${index}: ${restored} vs ${value}`,
    );
  }
});
