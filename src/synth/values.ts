/**
 * Deterministic synthetic tensor contents, fast enough to outrun a disk. Generating every value with a
 * PRNG would cost several nanoseconds per element, so instead, per (dtype, role), a pool of a few MiB of
 * valid values is drawn once from the seed. A tensor's bytes are cut into 64 KiB segments anchored at
 * the tensor's start; each segment is a copy of the pool at an offset hashed from (seed, tensor name,
 * segment index), with a hashed key XORed into every fourth word, touching only low mantissa bits.
 * So the bytes of a tensor depend only on the seed, its name, dtype and role (not on sharding or
 * chunking), every segment differs, and every value stays finite: exponent bits are never touched, and
 * FP8 pools stay at or below 240 so that no mantissa change can produce the E4M3 NaN pattern.
 */

import { assert } from '../errors.js';
import { encodeBf16, encodeE4m3, encodeF16 } from '../format/float-bits.js';

export type ValueRole = 'weight' | 'bias' | 'norm' | 'scale';
export type ValueDtype = 'BF16' | 'F16' | 'F32' | 'F8_E4M3';

/** What the generator needs to know about a tensor: its name keys the content, dtype and role the pool. */
export interface ValueSource {
  name: string;
  dtype: ValueDtype;
  role: ValueRole;
}

export const SEGMENT_BYTES = 64 * 1024;
const LARGE_POOL_BYTES = 4 * 1024 * 1024;
const SMALL_POOL_BYTES = 256 * 1024;
const POOL_OFFSET_ALIGNMENT_BYTES = 8;
const ALPHABET_SIZE = 65536;
const XOR_STRIDE_WORDS = 4;

/** Standard deviation of dense weights, as in the usual `initializer_range` of 0.02. */
export const WEIGHT_STD = 0.02;
/** FP8 weights are stored as q with weight = q * scale; q ~ N(0, 56) keeps 240 more than 4 sigma away. */
export const FP8_VALUE_STD = 56;
export const FP8_VALUE_MAX = 240;
export const FP8_SCALE_TYPICAL = WEIGHT_STD / FP8_VALUE_STD;

// The XOR keys only reach into low mantissa bits; norms and scales get gentler masks to stay near their centre.
const WIDE_MASKS: Record<ValueDtype, number> = {
  BF16: 0x001f001f,
  F16: 0x00ff00ff,
  F32: 0x000fffff,
  F8_E4M3: 0x07070707,
};
const NARROW_MASKS: Record<ValueDtype, number> = {
  BF16: 0x00070007,
  F16: 0x003f003f,
  F32: 0x0000ffff,
  F8_E4M3: 0x03030303,
};
const DTYPE_CODES: Record<ValueDtype, number> = { BF16: 1, F16: 2, F32: 3, F8_E4M3: 4 };
const ROLE_CODES: Record<ValueRole, number> = { weight: 1, bias: 2, norm: 3, scale: 4 };

// The XOR fast path views bytes as little-endian 32-bit words.
assert(new Uint8Array(new Uint32Array([1]).buffer)[0] === 1, 'synthetic values assume a little-endian host');

interface Pool {
  bytes: Uint8Array;
  mask: number;
  offsetChoices: number;
}

export class ValueGenerator {
  private readonly seedLow: number;
  private readonly seedHigh: number;
  private readonly pools = new Map<string, Pool>();

  constructor(seed: number) {
    assert(Number.isSafeInteger(seed) && seed >= 0, `seed must be a non-negative safe integer, got ${seed}`);
    this.seedLow = seed >>> 0;
    this.seedHigh = Math.floor(seed / 2 ** 32) >>> 0;
  }

  /** Writes bytes [tensorOffset, tensorOffset + target.length) of the tensor's contents into target. */
  fill(target: Uint8Array, source: ValueSource, tensorOffset: number): void {
    const pool = this.pool(source.dtype, source.role);
    const key = hashString(source.name, hash4(this.seedLow, this.seedHigh, 0x7e45, 0x0b));
    let done = 0;
    while (done < target.length) {
      const position = tensorOffset + done;
      const segment = Math.floor(position / SEGMENT_BYTES);
      const within = position - segment * SEGMENT_BYTES;
      const length = Math.min(target.length - done, SEGMENT_BYTES - within);
      const h = hash4(key, segment >>> 0, Math.floor(segment / 2 ** 32), this.seedLow);
      const start = (h % pool.offsetChoices) * POOL_OFFSET_ALIGNMENT_BYTES + within;
      const piece = target.subarray(done, done + length);
      piece.set(pool.bytes.subarray(start, start + length));
      xorKey(piece, hash4(h, key, 0x2545f491, this.seedHigh) & pool.mask, within % (XOR_STRIDE_WORDS * 4));
      done += length;
    }
  }

  private pool(dtype: ValueDtype, role: ValueRole): Pool {
    const name = `${dtype}/${role}`;
    let pool = this.pools.get(name);
    if (pool === undefined) {
      pool = buildPool(dtype, role, hash4(this.seedLow, this.seedHigh, DTYPE_CODES[dtype], ROLE_CODES[role]));
      this.pools.set(name, pool);
    }
    return pool;
  }
}

/**
 * Drawing millions of normal samples would take about a second per pool, so an alphabet of 65536
 * encoded samples is drawn instead and the pool is filled with random picks from it.
 */
function buildPool(dtype: ValueDtype, role: ValueRole, seed: number): Pool {
  const bytes = new Uint8Array(role === 'weight' ? LARGE_POOL_BYTES : SMALL_POOL_BYTES);
  const random = new Xoshiro128(seed);
  const sample = sampler(dtype, role, random);
  const pick = (alphabet: ArrayLike<number>, pool: { length: number; [index: number]: number }): void => {
    for (let i = 0; i < pool.length; i++) pool[i] = alphabet[random.next() >>> 16] ?? 0;
  };
  if (dtype === 'F32') {
    pick(Float32Array.from({ length: ALPHABET_SIZE }, sample), new Float32Array(bytes.buffer));
  } else if (dtype === 'F8_E4M3') {
    pick(
      Uint8Array.from({ length: ALPHABET_SIZE }, () => encodeE4m3(sample())),
      bytes,
    );
  } else {
    const encode = dtype === 'BF16' ? encodeBf16 : encodeF16;
    pick(
      Uint16Array.from({ length: ALPHABET_SIZE }, () => encode(sample())),
      new Uint16Array(bytes.buffer),
    );
  }
  const offsetChoices = (bytes.length - SEGMENT_BYTES) / POOL_OFFSET_ALIGNMENT_BYTES + 1;
  const mask = role === 'weight' || role === 'bias' ? WIDE_MASKS[dtype] : NARROW_MASKS[dtype];
  return { bytes, mask, offsetChoices };
}

/** The value distribution of each role; FP8 weights are quantised values, scales are positive. */
function sampler(dtype: ValueDtype, role: ValueRole, random: Xoshiro128): () => number {
  const normal = normalSampler(random);
  if (role === 'norm') return () => 1 + 0.05 * normal();
  if (role === 'bias') return () => 0.05 * normal();
  if (role === 'scale') return () => FP8_SCALE_TYPICAL * Math.exp(0.2 * normal());
  if (dtype === 'F8_E4M3') {
    return () => Math.max(-FP8_VALUE_MAX, Math.min(FP8_VALUE_MAX, FP8_VALUE_STD * normal()));
  }
  return () => WEIGHT_STD * normal();
}

/** Box-Muller; the spare second value is kept for the next call. */
function normalSampler(random: Xoshiro128): () => number {
  let spare: number | undefined;
  return () => {
    if (spare !== undefined) {
      const value = spare;
      spare = undefined;
      return value;
    }
    const u1 = (random.next() + 1) / 2 ** 32;
    const u2 = random.next() / 2 ** 32;
    const radius = Math.sqrt(-2 * Math.log(u1));
    spare = radius * Math.sin(2 * Math.PI * u2);
    return radius * Math.cos(2 * Math.PI * u2);
  };
}

/**
 * XORs a 4-byte little-endian key into the first word of every 16 bytes of a segment; `phase` is where
 * piece[0] sits within its 16-byte group. Touching every word would make generation several times
 * slower in JavaScript; one word in four is enough to make every segment distinct.
 */
function xorKey(piece: Uint8Array, key: number, phase: number): void {
  if (key === 0) return;
  let done = 0;
  if (phase % 4 === 0 && piece.byteOffset % 4 === 0) {
    // Int32 rather than Uint32 elements: values above 2^31 would leave V8's fast integer path.
    const words = new Int32Array(piece.buffer, piece.byteOffset, piece.length >>> 2);
    const signedKey = key | 0;
    for (let i = (XOR_STRIDE_WORDS - phase / 4) % XOR_STRIDE_WORDS; i < words.length; i += XOR_STRIDE_WORDS) {
      words[i] = (words[i] ?? 0) ^ signedKey;
    }
    done = words.length * 4;
  }
  for (let i = done; i < piece.length; i++) {
    const position = (phase + i) % (XOR_STRIDE_WORDS * 4);
    if (position < 4) piece[i] = (piece[i] ?? 0) ^ ((key >>> (position * 8)) & 0xff);
  }
}

/** xoshiro128**: a small, fast 32-bit PRNG; its state is seeded through splitmix32. */
class Xoshiro128 {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number) {
    let state = seed >>> 0;
    const next = (): number => {
      state = (state + 0x9e3779b9) >>> 0;
      return fmix32(state);
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next() | 1;
  }

  next(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }
}

function rotl(x: number, bits: number): number {
  return (x << bits) | (x >>> (32 - bits));
}

/** The murmur3 finaliser: every input bit affects every output bit. */
function fmix32(value: number): number {
  let h = value;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

function mixWord(h: number, word: number): number {
  let k = Math.imul(word, 0xcc9e2d51);
  k = Math.imul(rotl(k, 15), 0x1b873593);
  return (Math.imul(rotl(h ^ k, 13), 5) + 0xe6546b64) | 0;
}

function hash4(a: number, b: number, c: number, d: number): number {
  return fmix32(mixWord(mixWord(mixWord(mixWord(0x3c6ef372, a), b), c), d));
}

function hashString(text: string, seed: number): number {
  let h = seed;
  for (let i = 0; i < text.length; i++) h = mixWord(h, text.charCodeAt(i));
  return fmix32(h ^ text.length);
}
