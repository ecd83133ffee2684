/**
 * Where a slice's bytes are in the source file. Safetensors stores tensors row-major, so a slice of
 * dim 0 is one contiguous range, and a slice of dim 1 is one range per index of dim 0, each the slice's
 * width and a full row apart: a strided run, coalesced into one range when the slice covers whole rows.
 * Runs are listed in the slice's own row-major order, so reading them in order and concatenating gives
 * the slice exactly as `tensor.narrow(dim, start, length).contiguous()` would.
 */

import { WeightcastError, assert } from '../../errors.js';
import { DTYPE_BITS, type Dtype } from '../../format/dtype.js';
import type { ByteRun, SourceTensor, TensorSlice } from './types.js';

function product(values: readonly number[]): number {
  return values.reduce((total, value) => total * value, 1);
}

/** Bytes per element; packed sub-byte types (F4, F6) cannot be cut at arbitrary elements. */
export function elementBytes(dtype: Dtype, tensor: string): number {
  const bits = DTYPE_BITS[dtype];
  if (bits % 8 !== 0) {
    throw new WeightcastError(
      'PLAN_UNSUPPORTED_MODEL',
      `tensor ${tensor}: cannot slice ${dtype}, whose elements are smaller than a byte`,
      { tensor },
    );
  }
  return bits / 8;
}

export function sliceShape(shape: readonly number[], slice: TensorSlice | null): number[] {
  if (slice === null) return [...shape];
  return shape.map((size, dim) => (dim === slice.dim ? slice.length : size));
}

/** The runs covering a slice (or, for null, the whole tensor). An empty slice needs no bytes. */
export function sliceRuns(tensor: SourceTensor, slice: TensorSlice | null): ByteRun[] {
  const whole = tensor.end - tensor.start;
  if (slice === null) return whole === 0 ? [] : [contiguous(tensor.start, whole)];
  if (slice.length === 0) return [];
  const width = elementBytes(tensor.dtype, tensor.name);
  const { shape } = tensor;
  assert(
    slice.dim < shape.length,
    `slice dim ${slice.dim} of ${tensor.name} outside its ${shape.length} dims`,
  );
  assert(slice.start + slice.length <= (shape[slice.dim] ?? 0), `slice of ${tensor.name} runs past its end`);
  // Bytes of one step along the sliced dim: everything after it.
  const stepBytes = product(shape.slice(slice.dim + 1)) * width;
  const offset = tensor.start + slice.start * stepBytes;
  const length = slice.length * stepBytes;
  if (slice.dim === 0) return [contiguous(offset, length)];
  const rows = shape[0] ?? 1;
  const rowBytes = (shape[1] ?? 0) * stepBytes;
  if (length === rowBytes) return [contiguous(tensor.start, rows * rowBytes)];
  return [{ offset, length, stride: rowBytes, count: rows }];
}

function contiguous(offset: number, length: number): ByteRun {
  return { offset, length, stride: length, count: 1 };
}

export function runBytes(runs: readonly ByteRun[]): number {
  return runs.reduce((total, run) => total + run.length * run.count, 0);
}

export function runRangeCount(runs: readonly ByteRun[]): number {
  return runs.reduce((total, run) => total + run.count, 0);
}

/** Every [start, end) range of the runs, in order. */
export function* expandRuns(runs: readonly ByteRun[]): Generator<[number, number]> {
  for (const run of runs) {
    for (let index = 0; index < run.count; index++) {
      const start = run.offset + index * run.stride;
      yield [start, start + run.length];
    }
  }
}
