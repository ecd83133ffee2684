/**
 * Bit-level conversions between JavaScript numbers and the narrow float dtypes (BF16, F16, FP8 E4M3):
 * the synthesiser's value pools, the pre-sharder's FP8 decoding and the tests use them. They run
 * outside hot loops, so they favour clarity over speed. All encoders round to nearest, ties to even.
 */

const scratch = new DataView(new ArrayBuffer(4));

function float32Bits(value: number): number {
  scratch.setFloat32(0, value);
  return scratch.getUint32(0);
}

function bitsToFloat32(bits: number): number {
  scratch.setUint32(0, bits >>> 0);
  return scratch.getFloat32(0);
}

/** BF16 is the upper half of an F32; callers pass finite values only. */
export function encodeBf16(value: number): number {
  const bits = float32Bits(value);
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function decodeBf16(bits: number): number {
  return bitsToFloat32((bits & 0xffff) << 16);
}

/** IEEE half precision: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Overflow becomes infinity. */
export function encodeF16(value: number): number {
  const sign = value < 0 || Object.is(value, -0) ? 0x8000 : 0;
  const magnitude = Math.abs(value);
  if (Number.isNaN(value)) return 0x7e00;
  if (magnitude >= 65520) return sign | 0x7c00;
  if (magnitude < 2 ** -14) return sign | roundHalfEven(magnitude / 2 ** -24);
  let exponent = Math.floor(Math.log2(magnitude));
  if (2 ** exponent > magnitude) exponent -= 1;
  let mantissa = roundHalfEven((magnitude / 2 ** exponent - 1) * 1024);
  if (mantissa === 1024) {
    mantissa = 0;
    exponent += 1;
  }
  return sign | ((exponent + 15) << 10) | mantissa;
}

export function decodeF16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0x1f) return mantissa === 0 ? sign * Infinity : NaN;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

/**
 * FP8 E4M3 (the "fn" variant used by DeepSeek-V3 and vLLM): 1 sign, 4 exponent (bias 7), 3 mantissa
 * bits, no infinities, NaN only at S.1111.111. Magnitudes saturate at 448, the largest finite value.
 */
export function encodeE4m3(value: number): number {
  const sign = value < 0 || Object.is(value, -0) ? 0x80 : 0;
  const magnitude = Math.min(Math.abs(value), 448);
  if (magnitude < 2 ** -6) return sign | roundHalfEven(magnitude / 2 ** -9);
  let exponent = Math.floor(Math.log2(magnitude));
  if (2 ** exponent > magnitude) exponent -= 1;
  let mantissa = roundHalfEven((magnitude / 2 ** exponent - 1) * 8);
  if (mantissa === 8) {
    mantissa = 0;
    exponent += 1;
  }
  return sign | ((exponent + 7) << 3) | mantissa;
}

export function decodeE4m3(bits: number): number {
  const sign = bits & 0x80 ? -1 : 1;
  const exponent = (bits >>> 3) & 0x0f;
  const mantissa = bits & 0x07;
  if (exponent === 0x0f && mantissa === 0x07) return NaN;
  if (exponent === 0) return sign * mantissa * 2 ** -9;
  return sign * (1 + mantissa / 8) * 2 ** (exponent - 7);
}

export function isE4m3Nan(bits: number): boolean {
  return (bits & 0x7f) === 0x7f;
}

/** Rounds to the nearest integer, ties to even (IEEE 754's default rounding). */
export function roundHalfEven(value: number): number {
  const floor = Math.floor(value);
  const fraction = value - floor;
  if (fraction > 0.5) return floor + 1;
  if (fraction < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}
