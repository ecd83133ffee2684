/**
 * The plan manifest: a plan's layout plus a SHA-256 for every rank's slice of every tensor, computed
 * once by whoever holds all the bytes, so that a rank fetching only its byte ranges can verify exactly
 * what it fetched. A slice's digest is over its bytes laid out contiguously in the sliced tensor's
 * row-major order (what reading its byte ranges in order gives); a whole tensor's is over its bytes.
 *
 * Pure: canonical encoding (fixed key order, no whitespace; the file is exactly these bytes, so its
 * SHA-256 names it), hostile-input parsing (zod schema, then every slice checked against its tensor),
 * and the incremental hasher that the I/O shell feeds tensor rows to.
 */

import { createHash, type Hash } from 'node:crypto';
import { z } from 'zod';
import { WeightcastError, assert } from '../../errors.js';
import { DTYPES, DTYPE_BITS, elementCount, type Dtype } from '../../format/dtype.js';
import { parseJsonDocument, type DocumentCheck } from '../../util/json-document.js';
import { safeRelativePathProblem } from '../../util/safe-path.js';
import { sliceShape } from './byte-ranges.js';
import { PLAN_ARCHITECTURES, type ParallelPlan, type PlanArchitecture, type TensorSlice } from './types.js';

export const PLAN_MANIFEST_FORMAT = 'weightcast-plan-manifest';
export const PLAN_MANIFEST_VERSION = 1;
/** Large enough for DeepSeek-V3 at 64 ranks; past this a plan manifest is broken or hostile. */
export const PLAN_MANIFEST_BYTES_MAX = 512 * 1024 * 1024;
const NAME_BYTES_MAX = 4096;
const SHAPE_DIMS_MAX = 64;

export interface PlanManifestTensor {
  name: string;
  file: string;
  dtype: Dtype;
  shape: number[];
  slice: TensorSlice | null;
  bytes: number;
  sha256: string;
}

export interface PlanManifestRank {
  rank: number;
  stage: number;
  tpRank: number;
  tensors: PlanManifestTensor[];
}

export interface PlanManifest {
  architecture: PlanArchitecture;
  tp: number;
  pp: number;
  ep: number;
  weights: number[] | null;
  vocab: { size: number; padded: number };
  /** The source files the slices come from, with their sizes. */
  files: Array<{ path: string; size: number }>;
  ranks: PlanManifestRank[];
}

/** Identifies one distinct slice of one tensor; ranks holding the same slice share its digest. */
export function sliceKey(name: string, slice: TensorSlice | null): string {
  return slice === null ? `${name}|whole` : `${name}|${slice.dim}:${slice.start}:${slice.length}`;
}

/** Assembles the manifest from a plan and the digest of every slice it names (keyed by sliceKey). */
export function planManifestFrom(
  plan: ParallelPlan,
  files: ReadonlyArray<{ path: string; size: number }>,
  digests: ReadonlyMap<string, string>,
): PlanManifest {
  return {
    architecture: plan.architecture,
    tp: plan.tp,
    pp: plan.pp,
    ep: plan.ep,
    weights: plan.weights === null ? null : [...plan.weights],
    vocab: { ...plan.vocab },
    files: [...files].sort((a, b) => compare(a.path, b.path)).map(({ path, size }) => ({ path, size })),
    ranks: plan.ranks.map((rank) => ({
      rank: rank.rank,
      stage: rank.stage,
      tpRank: rank.tpRank,
      tensors: rank.tensors.map((tensor) => {
        const sha256 = digests.get(sliceKey(tensor.name, tensor.slice));
        assert(sha256 !== undefined, `no digest for ${sliceKey(tensor.name, tensor.slice)}`);
        return {
          name: tensor.name,
          file: tensor.file,
          dtype: tensor.dtype,
          shape: [...tensor.shape],
          slice: tensor.slice === null ? null : { ...tensor.slice },
          bytes: tensor.bytes,
          sha256,
        };
      }),
    })),
  };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function canonicalSlice(slice: TensorSlice | null): Record<string, number> | null {
  if (slice === null) return null;
  const out: Record<string, number> = { dim: slice.dim, start: slice.start, length: slice.length };
  if (slice.padded !== undefined) out['padded'] = slice.padded;
  return out;
}

/** The canonical bytes: what is written to disk and what the manifest's digest is taken over. */
export function encodePlanManifest(manifest: PlanManifest): Buffer {
  const document = {
    format: PLAN_MANIFEST_FORMAT,
    version: PLAN_MANIFEST_VERSION,
    architecture: manifest.architecture,
    tp: manifest.tp,
    pp: manifest.pp,
    ep: manifest.ep,
    weights: manifest.weights,
    vocab: { size: manifest.vocab.size, padded: manifest.vocab.padded },
    files: manifest.files.map(({ path, size }) => ({ path, size })),
    ranks: manifest.ranks.map((rank) => ({
      rank: rank.rank,
      stage: rank.stage,
      tpRank: rank.tpRank,
      tensors: rank.tensors.map((tensor) => ({
        name: tensor.name,
        file: tensor.file,
        dtype: tensor.dtype,
        shape: tensor.shape,
        slice: canonicalSlice(tensor.slice),
        bytes: tensor.bytes,
        sha256: tensor.sha256,
      })),
    })),
  };
  return Buffer.from(JSON.stringify(document), 'utf8');
}

export function planManifestDigest(manifest: PlanManifest): string {
  return 'sha256:' + createHash('sha256').update(encodePlanManifest(manifest)).digest('hex');
}

const count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const positive = z.number().int().min(1).max(65536);

const sliceSchema = z.strictObject({
  dim: z.union([z.literal(0), z.literal(1)]),
  start: count,
  length: count,
  padded: count.optional(),
});

const tensorSchema = z.strictObject({
  name: z.string().min(1).max(NAME_BYTES_MAX),
  file: z.string(),
  dtype: z.enum(DTYPES as [Dtype, ...Dtype[]]),
  shape: z.array(count).max(SHAPE_DIMS_MAX),
  slice: sliceSchema.nullable(),
  bytes: count,
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'expected 64 lowercase hex digits'),
});

const manifestSchema = z.strictObject({
  format: z.literal(PLAN_MANIFEST_FORMAT),
  version: z.literal(PLAN_MANIFEST_VERSION),
  architecture: z.enum(PLAN_ARCHITECTURES),
  tp: positive,
  pp: positive,
  ep: positive,
  weights: z.array(positive.max(1_000_000)).nullable(),
  vocab: z.strictObject({ size: count, padded: count }),
  files: z.array(z.strictObject({ path: z.string(), size: count })),
  ranks: z.array(
    z.strictObject({
      rank: count,
      stage: count,
      tpRank: count,
      tensors: z.array(tensorSchema),
    }),
  ),
});

function invalid(source: string, message: string, details: Record<string, unknown> = {}): WeightcastError {
  return new WeightcastError('PLAN_MANIFEST_INVALID', `${source}: ${message}`, { file: source, ...details });
}

/** Parses a plan manifest from outside: schema first, then every rank, file and slice cross-checked. */
export function parsePlanManifest(bytes: Buffer | string, source: string): PlanManifest {
  const body = parseJsonDocument(bytes, source, zodCheck(manifestSchema), {
    name: 'plan manifest',
    bytesMax: PLAN_MANIFEST_BYTES_MAX,
    tooLargeCode: 'PLAN_MANIFEST_INVALID',
    invalidCode: 'PLAN_MANIFEST_INVALID',
  });
  const manifest: PlanManifest = {
    architecture: body.architecture,
    tp: body.tp,
    pp: body.pp,
    ep: body.ep,
    weights: body.weights,
    vocab: body.vocab,
    files: body.files,
    ranks: body.ranks.map((rank) => ({
      ...rank,
      tensors: rank.tensors.map((tensor) => ({ ...tensor, slice: toSlice(tensor.slice) })),
    })),
  };
  checkManifest(source, manifest);
  return manifest;
}

/** The plan manifest keeps zod (strict objects, unions): its check for parseJsonDocument. */
function zodCheck<T>(schema: z.ZodType<T>): DocumentCheck<T> {
  return (raw) => {
    const parsed = schema.safeParse(raw);
    if (parsed.success) return { ok: true, value: parsed.data };
    const issue = parsed.error.issues[0];
    return {
      ok: false,
      where: issue === undefined ? '(root)' : `${issue.path.join('.') || '(root)'}: ${issue.message}`,
    };
  };
}

function toSlice(slice: z.infer<typeof sliceSchema> | null): TensorSlice | null {
  if (slice === null) return null;
  const out: TensorSlice = { dim: slice.dim, start: slice.start, length: slice.length };
  if (slice.padded !== undefined) out.padded = slice.padded;
  return out;
}

function checkManifest(source: string, manifest: PlanManifest): void {
  const { tp, pp, ep } = manifest;
  if (tp % ep !== 0 && ep % tp !== 0)
    throw invalid(source, `ep ${ep} and tp ${tp} do not divide one another`);
  if (manifest.weights !== null && manifest.weights.length !== tp) {
    throw invalid(source, `${manifest.weights.length} weights for tp ${tp}`);
  }
  const perStage = Math.max(tp, ep);
  if (manifest.ranks.length !== perStage * pp) {
    throw invalid(
      source,
      `${manifest.ranks.length} ranks, but tp ${tp}, pp ${pp}, ep ${ep} make ${perStage * pp}`,
    );
  }
  const files = new Map<string, number>();
  for (const file of manifest.files) {
    const problem = safeRelativePathProblem(file.path);
    if (problem !== undefined) throw invalid(source, `file path ${JSON.stringify(file.path)} ${problem}`);
    if (files.has(file.path)) throw invalid(source, `file ${file.path} is listed twice`);
    files.set(file.path, file.size);
  }
  manifest.ranks.forEach((rank, index) => {
    const expected = { rank: index, stage: Math.floor(index / perStage), tpRank: (index % perStage) % tp };
    if (rank.rank !== expected.rank || rank.stage !== expected.stage || rank.tpRank !== expected.tpRank) {
      throw invalid(
        source,
        `rank entry ${index} says rank ${rank.rank}, stage ${rank.stage}, tp rank ${rank.tpRank}`,
      );
    }
    const names = new Set<string>();
    for (const tensor of rank.tensors) {
      if (names.has(tensor.name))
        throw invalid(source, `rank ${index} lists ${tensor.name} twice`, { tensor: tensor.name });
      names.add(tensor.name);
      checkTensor(source, index, tensor, files);
    }
  });
}

function checkTensor(
  source: string,
  rank: number,
  tensor: PlanManifestTensor,
  files: ReadonlyMap<string, number>,
): void {
  const where = `rank ${rank}: tensor ${tensor.name}`;
  const fileSize = files.get(tensor.file);
  if (fileSize === undefined)
    throw invalid(source, `${where}: file ${tensor.file} is not listed`, { tensor: tensor.name });
  const bits = elementCount(tensor.shape) * BigInt(DTYPE_BITS[tensor.dtype]);
  if (bits / 8n > BigInt(fileSize))
    throw invalid(source, `${where}: larger than its file`, { tensor: tensor.name });
  const { slice } = tensor;
  if (slice !== null) {
    const size = tensor.shape[slice.dim];
    if (size === undefined || slice.start + slice.length > size) {
      throw invalid(
        source,
        `${where}: slice dim ${slice.dim} [${slice.start}, +${slice.length}) lies outside ${JSON.stringify(tensor.shape)}`,
        {
          tensor: tensor.name,
        },
      );
    }
    if (slice.padded !== undefined && slice.padded < slice.length) {
      throw invalid(source, `${where}: padded ${slice.padded} is less than the ${slice.length} real rows`, {
        tensor: tensor.name,
      });
    }
  }
  const sliceBits = elementCount(sliceShape(tensor.shape, slice)) * BigInt(DTYPE_BITS[tensor.dtype]);
  if (sliceBits % 8n !== 0n || sliceBits / 8n !== BigInt(tensor.bytes)) {
    throw invalid(source, `${where}: ${tensor.bytes} bytes does not match its ${tensor.dtype} slice`, {
      tensor: tensor.name,
    });
  }
}

/** Checks bytes a rank fetched against the digest its plan manifest records for them. */
export function checkSliceBytes(tensor: PlanManifestTensor, bytes: Uint8Array): void {
  const actual = createHash('sha256').update(bytes).digest('hex');
  if (bytes.length !== tensor.bytes || actual !== tensor.sha256) {
    throw new WeightcastError(
      'PLAN_SLICE_HASH_MISMATCH',
      `tensor ${tensor.name}: the ${bytes.length} bytes of its slice do not match the plan manifest's SHA-256`,
      { tensor: tensor.name, expected: tensor.sha256, actual },
    );
  }
}

/**
 * Hashes every wanted slice of one tensor in a single pass over its bytes. The caller feeds the
 * tensor's bytes in order, in chunks of whole dim-0 rows; each slice's hash sees exactly its own bytes
 * in row-major order. Memory is the caller's chunk, whatever the tensor's size.
 */
export class TensorSliceHasher {
  private readonly hashes = new Map<string, { slice: TensorSlice | null; hash: Hash }>();
  /** Bytes of one index along dim 0 (the whole tensor for a scalar). */
  readonly rowBytes: number;
  /** Bytes of one index along dim 1, within a row. */
  private readonly columnBytes: number;
  readonly rows: number;
  private nextRow = 0;

  constructor(
    private readonly tensor: { name: string; dtype: Dtype; shape: readonly number[] },
    slices: ReadonlyArray<TensorSlice | null>,
  ) {
    const width = DTYPE_BITS[tensor.dtype] / 8;
    const inner = (from: number): number => tensor.shape.slice(from).reduce((total, size) => total * size, 1);
    this.rows = tensor.shape[0] ?? 1;
    this.rowBytes = tensor.shape.length === 0 ? width : inner(1) * width;
    this.columnBytes = inner(2) * width;
    // A tensor with a zero-sized dim has no bytes to feed: every slice's digest is that of nothing.
    if (this.rowBytes === 0) this.nextRow = this.rows;
    for (const slice of slices) {
      const key = sliceKey(tensor.name, slice);
      if (!this.hashes.has(key)) this.hashes.set(key, { slice, hash: createHash('sha256') });
    }
  }

  /** The next `bytes.length / rowBytes` rows of the tensor. */
  update(bytes: Uint8Array): void {
    assert(bytes.length % this.rowBytes === 0, `${this.tensor.name}: chunk is not whole rows`);
    const first = this.nextRow;
    const rows = bytes.length / this.rowBytes;
    for (const { slice, hash } of this.hashes.values()) {
      if (slice === null) {
        hash.update(bytes);
      } else if (slice.dim === 0) {
        const from = Math.max(first, slice.start);
        const to = Math.min(first + rows, slice.start + slice.length);
        if (from < to)
          hash.update(bytes.subarray((from - first) * this.rowBytes, (to - first) * this.rowBytes));
      } else if (slice.length > 0) {
        for (let row = 0; row < rows; row++) {
          const begin = row * this.rowBytes + slice.start * this.columnBytes;
          hash.update(bytes.subarray(begin, begin + slice.length * this.columnBytes));
        }
      }
    }
    this.nextRow += rows;
  }

  /** Digests by sliceKey; call once every row has been fed. */
  digests(): Map<string, string> {
    assert(this.nextRow === this.rows, `${this.tensor.name}: ${this.nextRow} of ${this.rows} rows hashed`);
    return new Map([...this.hashes].map(([key, { hash }]) => [key, hash.digest('hex')]));
  }
}
