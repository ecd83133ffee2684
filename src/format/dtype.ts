/**
 * The tensor element types of the safetensors format and their widths in bits, in the order of the
 * reference implementation's `Dtype` enum (huggingface/safetensors). Sub-byte types (F4, F6_*) are
 * packed; a tensor of them must fill whole bytes.
 */

export const DTYPE_BITS = {
  BOOL: 8,
  F4: 4,
  F6_E2M3: 6,
  F6_E3M2: 6,
  U8: 8,
  I8: 8,
  F8_E5M2: 8,
  F8_E4M3: 8,
  F8_E8M0: 8,
  F8_E4M3FNUZ: 8,
  F8_E5M2FNUZ: 8,
  I16: 16,
  U16: 16,
  F16: 16,
  BF16: 16,
  I32: 32,
  U32: 32,
  F32: 32,
  C64: 64,
  F64: 64,
  I64: 64,
  U64: 64,
} as const;

export type Dtype = keyof typeof DTYPE_BITS;

export const DTYPES: readonly Dtype[] = Object.keys(DTYPE_BITS) as Dtype[];

export function isDtype(value: unknown): value is Dtype {
  return typeof value === 'string' && Object.hasOwn(DTYPE_BITS, value);
}

export function dtypeBits(dtype: Dtype): number {
  return DTYPE_BITS[dtype];
}

/** Element count of a shape, exact (bigint) so that absurd shapes cannot overflow silently. */
export function elementCount(shape: readonly number[]): bigint {
  let count = 1n;
  for (const dim of shape) count *= BigInt(dim);
  return count;
}

/** Bit size of a tensor; callers check that it is a whole number of bytes. */
export function tensorBits(dtype: Dtype, shape: readonly number[]): bigint {
  return elementCount(shape) * BigInt(DTYPE_BITS[dtype]);
}
