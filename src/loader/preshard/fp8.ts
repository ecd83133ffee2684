/**
 * FP8 E4M3 quantisation math for pre-sharding, pure and allocation-light: reading source elements
 * (BF16, F16, F32) as float32 bit patterns, the largest finite magnitude of a tensor or a block, and
 * encoding `w / scale` into E4M3 ("fn": no infinities, NaN only at S.1111.111, largest finite 448).
 *
 * Numerics follow what vLLM does when it quantises a checkpoint online: the scale is a float32,
 * `amax / 448` with amax clamped to at least 1e-12; each value is `float32(w / scale)`, saturated to
 * +-448, rounded to nearest with ties to even. NaN stays NaN; infinities saturate; amax ignores both
 * (an infinite weight would otherwise turn every other value into zero).
 *
 * Elements are read through a DataView: source tensors sit wherever their file put them, so a BF16
 * tensor need not start at an even address.
 */

import { WeightcastError } from '../../errors.js';
import type { Dtype } from '../../format/dtype.js';
import { roundHalfEven } from '../../format/float-bits.js';

export const E4M3_MAX = 448;
/** Scales are `max(amax, AMAX_MIN) / 448`, so an all-zero tensor gets a tiny positive scale, never 0. */
export const AMAX_MIN = 1e-12;
export const E4M3_NAN = 0x7f;
/** The side of a quantisation block, in elements, along both dimensions (DeepSeek-V3's 128x128). */
export const FP8_BLOCK = 128;

const F32_EXPONENT_MASK = 0x7f800000;
const F32_ABS_MASK = 0x7fffffff;
/** float32 bits of 448: exponent 8, mantissa 0.75. */
const F32_BITS_448 = 0x43e00000;
/** float32 bits of 2^-6, the smallest normal E4M3 magnitude. */
const F32_BITS_MIN_NORMAL = 0x3c800000;
/** (127 - 7) << 3: moves a float32 exponent (bias 127) to E4M3's (bias 7) after a 20-bit shift. */
const EXPONENT_REBIAS = 120 << 3;

/** Source dtypes quantisation reads; anything else is left as it is. */
export type FloatSourceDtype = 'BF16' | 'F16' | 'F32';

export function isFloatSource(dtype: Dtype): dtype is FloatSourceDtype {
  return dtype === 'BF16' || dtype === 'F16' || dtype === 'F32';
}

const bitsView = new DataView(new ArrayBuffer(4));

export function f32FromBits(bits: number): number {
  bitsView.setUint32(0, bits >>> 0);
  return bitsView.getFloat32(0);
}

export function bitsFromF32(value: number): number {
  bitsView.setFloat32(0, value);
  return bitsView.getUint32(0);
}

let f16Table: Uint32Array | undefined;

/** float32 bits of every F16 pattern, built once (256 KiB). */
function f16ToF32Bits(): Uint32Array {
  if (f16Table !== undefined) return f16Table;
  const table = new Uint32Array(65536);
  for (let bits = 0; bits < 65536; bits++) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >>> 10) & 0x1f;
    const mantissa = bits & 0x3ff;
    let value: number;
    if (exponent === 0x1f) value = mantissa === 0 ? sign * Infinity : NaN;
    else if (exponent === 0) value = sign * mantissa * 2 ** -24;
    else value = sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
    table[bits] = bitsFromF32(value);
  }
  f16Table = table;
  return table;
}

/** Reads element `index` of a BF16/F16/F32 tensor as float32 bits. */
export type ElementReader = (index: number) => number;

export function elementReader(bytes: Uint8Array, dtype: FloatSourceDtype): ElementReader {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'BF16') return (index) => (view.getUint16(index * 2, true) << 16) >>> 0;
  if (dtype === 'F32') return (index) => view.getUint32(index * 4, true);
  const table = f16ToF32Bits();
  return (index) => table[view.getUint16(index * 2, true)] ?? 0;
}

export function elementWidth(dtype: FloatSourceDtype): number {
  return dtype === 'F32' ? 4 : 2;
}

/** The largest finite magnitude among elements [first, first + count) of a tensor (0 if none). */
export function amaxOf(read: ElementReader, first: number, count: number): number {
  let largestBits = 0;
  for (let index = first; index < first + count; index++) {
    const abs = read(index) & F32_ABS_MASK;
    // Finite only: an exponent of all ones is an infinity or a NaN.
    if ((abs & F32_EXPONENT_MASK) !== F32_EXPONENT_MASK && abs > largestBits) largestBits = abs;
  }
  // Positive float32 bit patterns order like their values, so the largest pattern is the amax.
  return f32FromBits(largestBits);
}

/** The float32 scale of a tensor or block whose largest finite magnitude is `amax`. */
export function scaleFor(amax: number): number {
  return Math.fround(Math.max(amax, AMAX_MIN) / E4M3_MAX);
}

/**
 * E4M3 of a float32 given by its bits: NaN stays NaN, magnitudes from 448 up (infinity included)
 * saturate to 448, the rest round to nearest, ties to even.
 */
export function encodeE4m3Bits(bits: number): number {
  const sign = (bits >>> 24) & 0x80;
  const abs = bits & F32_ABS_MASK;
  if (abs > F32_EXPONENT_MASK) return sign | E4M3_NAN;
  if (abs >= F32_BITS_448) return sign | 0x7e;
  if (abs >= F32_BITS_MIN_NORMAL) {
    // Keep 3 of 23 mantissa bits, ties to even; a carry moves into the exponent as it should.
    const rounded = (abs + 0x7ffff + ((abs >>> 20) & 1)) >>> 20;
    return sign | (rounded - EXPONENT_REBIAS);
  }
  // Subnormal: multiples of 2^-9, from 0 to 7 (8 rounds up to the smallest normal, 0x08).
  return sign | roundHalfEven(f32FromBits(abs) * 512);
}

export function encodeE4m3(value: number): number {
  return encodeE4m3Bits(bitsFromF32(value));
}

/** Decoding has one implementation (in src/format/float-bits.ts, the synthesiser's too); the encoder here is written separately. */
export { decodeE4m3 } from '../../format/float-bits.js';

/** Quantises one element: float32(w / scale), encoded. */
export function quantiseBits(bits: number, scale: number): number {
  return encodeE4m3Bits(bitsFromF32(f32FromBits(bits) / scale));
}

/**
 * Quantises `count` consecutive elements starting at `first` with one scale into `out` from `at`.
 */
export function quantiseRun(
  read: ElementReader,
  first: number,
  count: number,
  scale: number,
  out: Uint8Array,
  at: number,
): void {
  for (let index = 0; index < count; index++) out[at + index] = quantiseBits(read(first + index), scale);
}

/** A 2-D row-major matrix of float elements: where element (row, column) is read. */
export interface Matrix {
  read: ElementReader;
  rows: number;
  columns: number;
  /** Element index of (0, 0) and the distance between rows, in elements. */
  origin: number;
  rowStride: number;
}

/**
 * Block quantisation of a matrix: 128x128 blocks (the last ones partial), each with its own scale
 * `amax / 448`. Writes rows x columns E4M3 codes row-major into `codes` and the float32 scales,
 * ceil(rows/128) x ceil(columns/128) row-major, into `scales` (little-endian, as safetensors stores them).
 */
export function quantiseBlocks(
  matrix: Matrix,
  codes: Uint8Array,
  scales: Uint8Array,
  block = FP8_BLOCK,
): void {
  const blockRows = Math.ceil(matrix.rows / block);
  const blockColumns = Math.ceil(matrix.columns / block);
  if (codes.length !== matrix.rows * matrix.columns || scales.length !== blockRows * blockColumns * 4) {
    throw new WeightcastError('LOADER_INVALID_REQUEST', 'block quantisation buffers do not match the matrix');
  }
  const scaleView = new DataView(scales.buffer, scales.byteOffset, scales.byteLength);
  for (let blockRow = 0; blockRow < blockRows; blockRow++) {
    const rowStart = blockRow * block;
    const rowEnd = Math.min(matrix.rows, rowStart + block);
    for (let blockColumn = 0; blockColumn < blockColumns; blockColumn++) {
      const columnStart = blockColumn * block;
      const width = Math.min(matrix.columns, columnStart + block) - columnStart;
      let amax = 0;
      for (let row = rowStart; row < rowEnd; row++) {
        amax = Math.max(
          amax,
          amaxOf(matrix.read, matrix.origin + row * matrix.rowStride + columnStart, width),
        );
      }
      const scale = scaleFor(amax);
      scaleView.setFloat32((blockRow * blockColumns + blockColumn) * 4, scale, true);
      for (let row = rowStart; row < rowEnd; row++) {
        const first = matrix.origin + row * matrix.rowStride + columnStart;
        quantiseRun(matrix.read, first, width, scale, codes, row * matrix.columns + columnStart);
      }
    }
  }
}
