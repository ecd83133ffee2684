/**
 * The one error type of weightcast. Every failure a user can meet carries a stable `code`
 * (documented in ARCHITECTURE.md); callers match on codes, never on message text. Wrapped causes go
 * in `cause`. A broken invariant in our own code is not a WeightcastError: it is an assertion.
 */

export type ErrorCode =
  // safetensors format (src/format)
  | 'SAFETENSORS_HEADER_TOO_SMALL'
  | 'SAFETENSORS_HEADER_TOO_LARGE'
  | 'SAFETENSORS_INVALID_HEADER_LENGTH'
  | 'SAFETENSORS_INVALID_UTF8'
  | 'SAFETENSORS_INVALID_HEADER_START'
  | 'SAFETENSORS_INVALID_JSON'
  | 'SAFETENSORS_INVALID_TENSOR_INFO'
  | 'SAFETENSORS_INVALID_METADATA'
  | 'SAFETENSORS_UNKNOWN_DTYPE'
  | 'SAFETENSORS_DUPLICATE_TENSOR'
  | 'SAFETENSORS_INVALID_OFFSET'
  | 'SAFETENSORS_OVERFLOW'
  | 'SAFETENSORS_TENSOR_SIZE_MISMATCH'
  | 'SAFETENSORS_MISALIGNED_SLICE'
  | 'SAFETENSORS_INCOMPLETE_BUFFER'
  | 'SAFETENSORS_TRUNCATED'
  | 'SAFETENSORS_WRITE_MISMATCH'
  | 'INDEX_INVALID'
  // manifests (src/manifest)
  | 'MANIFEST_INVALID'
  | 'MANIFEST_UNSAFE_PATH'
  | 'MANIFEST_SIZE_MISMATCH'
  | 'MANIFEST_DIGEST_MISMATCH'
  | 'MANIFEST_TOO_LARGE'
  // origins (src/origin)
  | 'ORIGIN_UNSUPPORTED'
  | 'ORIGIN_NOT_FOUND'
  | 'ORIGIN_HTTP_STATUS'
  | 'ORIGIN_RETRIES_EXHAUSTED'
  | 'ORIGIN_TIMEOUT'
  | 'ORIGIN_SHORT_READ'
  | 'ORIGIN_RANGE_UNSUPPORTED'
  | 'ORIGIN_TOO_MANY_REDIRECTS'
  | 'ORIGIN_NO_LISTING'
  | 'ORIGIN_IO'
  // integrity and transfer (src/pull, src/verify)
  | 'PIECE_HASH_MISMATCH'
  | 'PULL_DESTINATION_CONFLICT'
  // the swarm (src/swarm)
  | 'SWARM_PROTOCOL'
  | 'SWARM_UNKNOWN_MODEL'
  | 'SWARM_UNKNOWN_HOST'
  | 'SWARM_BUSY'
  | 'SWARM_PIECE_NOT_HELD'
  | 'SWARM_NEEDS_MANIFEST'
  | 'SCHEDULER_UNREACHABLE'
  // loader (src/loader)
  | 'PLAN_INVALID_OPTIONS'
  | 'PLAN_UNSUPPORTED_MODEL'
  | 'PLAN_UNKNOWN_TENSOR'
  | 'PLAN_SHAPE_MISMATCH'
  | 'PLAN_INDIVISIBLE'
  | 'PLAN_BLOCK_MISALIGNED'
  | 'PLAN_MANIFEST_INVALID'
  | 'PLAN_MANIFEST_DIGEST_MISMATCH'
  | 'PLAN_SLICE_HASH_MISMATCH'
  | 'LOADER_TENSOR_TOO_LARGE'
  | 'LOADER_INVALID_REQUEST'
  | 'PRESHARD_UNSUPPORTED'
  | 'PRESHARD_DESTINATION_CONFLICT'
  // seed tier (src/seed)
  | 'SEED_PLAN_INVALID'
  | 'SEED_PLACEMENT_IMPOSSIBLE'
  | 'SEED_NO_CATALOG'
  | 'SEED_CATALOG_CORRUPT'
  | 'SEED_CATALOG_CONFLICT'
  | 'SEED_UNKNOWN_MODEL'
  | 'SEED_UNKNOWN_NODE'
  | 'SEED_PIECE_NOT_HELD'
  | 'SEED_VERIFY_FAILED'
  | 'SEED_NODE_UNREACHABLE'
  | 'SEED_APPLY_LOCKED'
  | 'SEED_APPLY_FAILED'
  // everything else
  | 'SYNTH_INVALID_OPTIONS'
  | 'USAGE'
  | 'LIMIT_EXCEEDED'
  | 'ABORTED'
  | 'IO';

export interface ErrorDetails {
  /** The file (path or URL) the error is about, when there is one. */
  file?: string;
  /** The tensor the error is about, when there is one. */
  tensor?: string;
  [key: string]: unknown;
}

export class WeightcastError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'WeightcastError';
    this.code = code;
    this.details = details;
  }

  toJSON(): Record<string, unknown> {
    return { name: this.name, code: this.code, message: this.message, ...this.details };
  }
}

export function isWeightcastError(value: unknown, code?: ErrorCode): value is WeightcastError {
  return value instanceof WeightcastError && (code === undefined || value.code === code);
}

/** Turns an abort into our typed error, keeping the reason as the cause. */
export function abortError(signal: AbortSignal | undefined, what: string): WeightcastError {
  return new WeightcastError('ABORTED', `${what} was aborted`, {}, { cause: signal?.reason });
}

export function throwIfAborted(signal: AbortSignal | undefined, what: string): void {
  if (signal?.aborted === true) throw abortError(signal, what);
}

/** For broken invariants in our own code: these crash loudly and are never matched by users. */
export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(`weightcast invariant broken: ${message}`);
}

/**
 * Wraps a Node.js system error (ENOSPC, EACCES, ENOTDIR, ...) as a typed IO error naming what was
 * being done; anything else passes through unchanged.
 */
export function asIoError(error: unknown, what: string): unknown {
  if (error instanceof WeightcastError) return error;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !code.startsWith('E')) return error;
  const path = (error as { path?: unknown }).path;
  const details: ErrorDetails = { errno: code };
  if (typeof path === 'string') details.file = path;
  const message = error instanceof Error ? error.message : String(error);
  return new WeightcastError('IO', `${what}: ${message}`, details, { cause: error });
}
