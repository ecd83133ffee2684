/**
 * The one error type of weightcast. Every failure a user can meet carries a stable `code` (the
 * catalogue below, shown in the README's error table); callers match on codes, never on message text. Wrapped causes go
 * in `cause`. A broken invariant in our own code is not a WeightcastError: it is an assertion.
 */

/**
 * Every error a user can meet, as data: its HTTP status when a service answers with it, the CLI's
 * exit code (1: the job failed; 2: bad usage or bad input), whether running the same command again
 * makes progress (resumable), whether a peer or service may send it to us (remote: any other code
 * from the wire is a protocol error), and the one-line summary the README's error table shows (a
 * test keeps the two equal). The code type, the status tables, the exit classes and the resumable
 * set all derive from this one table.
 */
export interface ErrorEntry {
  status: number;
  exit: 1 | 2;
  resumable?: true;
  remote?: true;
  summary: string;
}

export const ERROR_CATALOGUE = {
  // safetensors format (src/format)
  SAFETENSORS_HEADER_TOO_SMALL: {
    status: 500,
    exit: 2,
    summary: 'the file is shorter than the 8-byte length prefix',
  },
  SAFETENSORS_HEADER_TOO_LARGE: {
    status: 500,
    exit: 2,
    summary: 'the header length exceeds 100,000,000 bytes',
  },
  SAFETENSORS_INVALID_HEADER_LENGTH: {
    status: 500,
    exit: 2,
    summary: 'the header length runs past the end of the file',
  },
  SAFETENSORS_INVALID_UTF8: { status: 500, exit: 2, summary: 'the header is not UTF-8' },
  SAFETENSORS_INVALID_HEADER_START: { status: 500, exit: 2, summary: 'the header does not start with `{`' },
  SAFETENSORS_INVALID_JSON: { status: 500, exit: 2, summary: 'the header is not valid JSON' },
  SAFETENSORS_INVALID_TENSOR_INFO: {
    status: 500,
    exit: 2,
    summary: 'a tensor entry lacks or misformats dtype, shape or data_offsets',
  },
  SAFETENSORS_INVALID_METADATA: { status: 500, exit: 2, summary: '`__metadata__` is not a map of strings' },
  SAFETENSORS_UNKNOWN_DTYPE: { status: 500, exit: 2, summary: 'a dtype the format does not define' },
  SAFETENSORS_DUPLICATE_TENSOR: { status: 500, exit: 2, summary: 'a tensor name appears twice' },
  SAFETENSORS_INVALID_OFFSET: {
    status: 500,
    exit: 2,
    summary: 'offsets out of order, overlapping, leaving gaps, or begin > end',
  },
  SAFETENSORS_OVERFLOW: { status: 500, exit: 2, summary: 'element or byte counts overflow' },
  SAFETENSORS_TENSOR_SIZE_MISMATCH: {
    status: 500,
    exit: 2,
    summary: "a tensor's byte range does not equal elements x dtype width",
  },
  SAFETENSORS_MISALIGNED_SLICE: {
    status: 500,
    exit: 2,
    summary: 'sub-byte elements that do not fill whole bytes',
  },
  SAFETENSORS_INCOMPLETE_BUFFER: { status: 500, exit: 2, summary: 'bytes after the last tensor' },
  SAFETENSORS_TRUNCATED: {
    status: 500,
    exit: 2,
    summary: 'the file ends before the data the header describes',
  },
  SAFETENSORS_WRITE_MISMATCH: {
    status: 500,
    exit: 2,
    summary: 'the writer was given more or fewer bytes than its header declares',
  },
  INDEX_INVALID: {
    status: 500,
    exit: 2,
    summary: '`model.safetensors.index.json` is malformed or names an unsafe shard path',
  },
  INDEX_SHARD_MISSING: {
    status: 500,
    exit: 2,
    summary: '`model.safetensors.index.json` names shard files the model directory does not hold',
  },
  // manifests (src/manifest)
  MANIFEST_INVALID: {
    status: 400,
    exit: 2,
    remote: true,
    summary: 'a manifest that is not valid (schema, duplicate paths, piece size)',
  },
  MANIFEST_UNSAFE_PATH: {
    status: 400,
    exit: 2,
    remote: true,
    summary: 'a path that could escape the model directory (`..`, absolute, NUL, ...)',
  },
  MANIFEST_SIZE_MISMATCH: {
    status: 400,
    exit: 2,
    remote: true,
    summary: 'sizes, piece counts or tensor ranges that do not add up',
  },
  MANIFEST_DIGEST_MISMATCH: {
    status: 400,
    exit: 2,
    remote: true,
    summary: 'a Merkle root or manifest digest that does not match',
  },
  MANIFEST_TOO_LARGE: {
    status: 413,
    exit: 2,
    remote: true,
    summary: 'a manifest or model beyond the limits',
  },
  // origins (src/origin)
  ORIGIN_UNSUPPORTED: {
    status: 500,
    exit: 2,
    summary: 'a source that is not a path, `file://`, `http://` or `https://`',
  },
  ORIGIN_NOT_FOUND: {
    status: 404,
    exit: 1,
    remote: true,
    summary: 'the file does not exist at the origin (404)',
  },
  // Remote: an agent stops a model with these, and a pull through it reports the agent's reason.
  ORIGIN_HTTP_STATUS: {
    status: 500,
    exit: 1,
    remote: true,
    summary: 'an HTTP status that is not retried (403, ...)',
  },
  ORIGIN_RETRIES_EXHAUSTED: {
    status: 500,
    exit: 1,
    remote: true,
    resumable: true,
    summary: 'retries (5xx, 429, timeouts, resets) ran out; the last cause is attached',
  },
  ORIGIN_UNREACHABLE: {
    status: 500,
    exit: 1,
    remote: true,
    summary:
      "nothing answered at an origin's address (connection refused, no such host) in a few tries over about 3 s, before it ever answered: check the URL",
  },
  // Remote too: any origin error a read ends with (not retried, or past the budget) stops an
  // agent's model (origin.ts, isFinalOriginError), and the pull through it reports it.
  ORIGIN_TIMEOUT: {
    status: 500,
    exit: 1,
    remote: true,
    resumable: true,
    summary: 'connect, headers or body idle timeout',
  },
  ORIGIN_SHORT_READ: {
    status: 500,
    exit: 1,
    remote: true,
    resumable: true,
    summary: 'fewer bytes than asked (a file shorter than the manifest says)',
  },
  ORIGIN_RANGE_UNSUPPORTED: {
    status: 500,
    exit: 1,
    remote: true,
    summary: 'the server ignored or mangled the `Range` request',
  },
  ORIGIN_TOO_MANY_REDIRECTS: { status: 500, exit: 1, remote: true, summary: 'more than 5 redirects' },
  ORIGIN_NO_LISTING: {
    status: 500,
    exit: 1,
    summary: 'an HTTP origin with neither index nor `model.safetensors`: pass `--manifest`',
  },
  ORIGIN_IO: { status: 500, exit: 1, remote: true, summary: 'a local origin could not be read' },
  // integrity and transfer (src/pull, src/verify)
  PIECE_HASH_MISMATCH: {
    status: 500,
    exit: 1,
    remote: true,
    resumable: true,
    summary: 'the origin kept sending bytes that fail verification; nothing was written',
  },
  PULL_DESTINATION_CONFLICT: {
    status: 500,
    exit: 2,
    remote: true,
    summary: 'a directory stands where the model has a file',
  },
  PULL_DESTINATION_SYMLINK: {
    status: 500,
    exit: 2,
    remote: true,
    summary: 'a symbolic link inside the destination, which a pull does not write through',
  },
  PULL_DESTINATION_IN_USE: {
    status: 500,
    exit: 1,
    summary: 'another pull on this machine is writing into that destination (`--to`)',
  },
  // the swarm (src/swarm)
  SWARM_PROTOCOL: {
    status: 400,
    exit: 1,
    remote: true,
    summary: 'a malformed message between agents and the scheduler',
  },
  SWARM_UNKNOWN_MODEL: {
    status: 409,
    exit: 1,
    remote: true,
    summary: 'the scheduler (or agent) has no swarm for that model yet',
  },
  SWARM_UNKNOWN_HOST: {
    status: 404,
    exit: 1,
    remote: true,
    summary: 'the scheduler forgot this agent (restart, timeout): it registers again',
  },
  SWARM_NAME_IN_USE: {
    status: 409,
    exit: 1,
    remote: true,
    summary: 'a live host of the swarm has that name at another address: a registration cannot take it over',
  },
  SWARM_DISTRUSTED: {
    status: 403,
    exit: 1,
    remote: true,
    summary:
      "this host's corrupt reports did not hold up when re-checked by other hosts (bytes it receives fail verification here: memory or disk fault, or it lies): the scheduler removed it",
  },
  SWARM_BUSY: {
    status: 503,
    exit: 1,
    remote: true,
    summary: "an agent's upload slots or local reads are full (HTTP 503 with `Retry-After`)",
  },
  SERVER_BUSY: {
    status: 503,
    exit: 1,
    resumable: true,
    remote: true,
    summary:
      "a service's buffer for request bodies or its connections from one address are full (HTTP 503 with `Retry-After`)",
  },
  SWARM_PIECE_NOT_HELD: {
    status: 404,
    exit: 1,
    remote: true,
    summary: 'a peer asked for bytes this agent has not verified',
  },
  SWARM_NEEDS_MANIFEST: {
    status: 500,
    exit: 2,
    remote: true,
    summary: 'a swarm pull was asked for without `--manifest`',
  },
  SCHEDULER_UNREACHABLE: { status: 500, exit: 1, summary: 'the scheduler (or agent API) did not answer' },
  AGENT_CACHE_IN_USE: {
    status: 500,
    exit: 1,
    summary: 'another agent on this machine uses that cache directory',
  },
  AGENT_UNREACHABLE: {
    status: 500,
    exit: 1,
    resumable: true,
    summary: 'a pull through an agent: no agent answered, or it stopped answering mid-pull',
  },
  // loader (src/loader)
  PLAN_INVALID_OPTIONS: {
    status: 500,
    exit: 2,
    summary: 'parallelism options a plan cannot honour (`--tp`, `--pp`, `--ep`, `--weights`, `--rank`)',
  },
  PLAN_UNSUPPORTED_MODEL: {
    status: 500,
    exit: 2,
    summary: 'a `config.json` that is missing, unreadable or of an architecture plans do not know',
  },
  PLAN_UNKNOWN_TENSOR: {
    status: 500,
    exit: 2,
    summary: 'tensors no parallelism rule covers (listed; `--replicate-unknown` replicates them instead)',
  },
  PLAN_SHAPE_MISMATCH: {
    status: 500,
    exit: 2,
    summary: "a tensor's shape disagrees with the config (heads, head size, block scales)",
  },
  PLAN_INDIVISIBLE: {
    status: 500,
    exit: 2,
    summary: 'an even split that does not divide (heads, rows, vocab), or weights that leave a rank nothing',
  },
  PLAN_BLOCK_MISALIGNED: {
    status: 500,
    exit: 2,
    summary: 'a slice of an FP8 block-quantised weight that does not start and end on a 128 block',
  },
  PLAN_MANIFEST_INVALID: {
    status: 500,
    exit: 2,
    summary: 'a plan manifest that is not valid (schema, slices outside their tensors, byte counts)',
  },
  PLAN_MANIFEST_DIGEST_MISMATCH: {
    status: 500,
    exit: 2,
    summary: 'a plan manifest whose SHA-256 is not the one expected',
  },
  PLAN_SLICE_HASH_MISMATCH: {
    status: 500,
    exit: 1,
    summary: "a slice's bytes do not match the SHA-256 its plan manifest records",
  },
  LOADER_TENSOR_TOO_LARGE: {
    status: 500,
    exit: 2,
    summary:
      "a tensor (with the pieces around it) does not fit the loader's memory budget: raise `--memory-mb`",
  },
  LOADER_INVALID_REQUEST: {
    status: 500,
    exit: 2,
    summary:
      'a load request names a file or tensor the model lacks, or byte ranges that overlap or leave the file',
  },
  PRESHARD_UNSUPPORTED: {
    status: 500,
    exit: 2,
    summary:
      'a pre-shard layout or quantisation the checkpoint cannot take (`--layout vllm` on a non-Llama/Qwen2 model, fusing parts that are already FP8 or of different dtypes)',
  },
  PRESHARD_DESTINATION_CONFLICT: {
    status: 500,
    exit: 2,
    summary: '`preshard --to` names a non-empty directory that is not an earlier pre-shard output',
  },
  // seed tier (src/seed)
  SEED_PLAN_INVALID: {
    status: 422,
    exit: 2,
    remote: true,
    summary: 'a malformed catalog snapshot or `distribute` option, or a move the catalog would refuse',
  },
  SEED_PLACEMENT_IMPOSSIBLE: {
    status: 500,
    exit: 2,
    remote: true,
    summary: 'more copies per piece than usable seed nodes, or `--nodes` above the active count',
  },
  SEED_NO_CATALOG: {
    status: 404,
    exit: 1,
    remote: true,
    summary: 'the scheduler was started without `--catalog DIR`',
  },
  SEED_CATALOG_CORRUPT: {
    status: 500,
    exit: 1,
    remote: true,
    summary: "the catalog's snapshot file cannot be read",
  },
  SEED_CATALOG_CONFLICT: {
    status: 409,
    exit: 1,
    remote: true,
    summary: 'a model is already in the catalog with another placement',
  },
  SEED_UNKNOWN_MODEL: {
    status: 404,
    exit: 1,
    remote: true,
    summary: 'the catalog or seed node has no such model (`put` it first)',
  },
  SEED_UNKNOWN_NODE: {
    status: 404,
    exit: 1,
    remote: true,
    summary: 'a placement names a node that never registered with the catalog',
  },
  SEED_PIECE_NOT_HELD: {
    status: 404,
    exit: 1,
    remote: true,
    summary: 'a seed node was asked for a piece it does not hold',
  },
  SEED_VERIFY_FAILED: {
    status: 422,
    exit: 1,
    remote: true,
    summary: 'bytes sent to or stored on a seed node do not match the manifest; nothing was stored',
  },
  SEED_NODE_UNREACHABLE: {
    status: 500,
    exit: 1,
    remote: true,
    summary: 'a seed node (or the catalog) did not answer',
  },
  SEED_APPLY_LOCKED: {
    status: 500,
    exit: 1,
    remote: true,
    summary: 'another `distribute --apply` of the same model is running on this machine',
  },
  SEED_APPLY_FAILED: {
    status: 500,
    exit: 1,
    remote: true,
    summary: 'some moves failed (not committed, old copies kept) or the read-back hashes differ',
  },
  // everything else
  SYNTH_INVALID_OPTIONS: { status: 500, exit: 2, summary: 'options `synth` cannot honour' },
  USAGE: { status: 400, exit: 2, remote: true, summary: 'a bad flag value' },
  LIMIT_EXCEEDED: {
    status: 413,
    exit: 1,
    remote: true,
    summary: 'a configured limit (files listed, nesting depth) was reached',
  },
  ABORTED: {
    status: 500,
    exit: 1,
    resumable: true,
    summary: 'the operation was cancelled (Ctrl-C, an AbortSignal)',
  },
  IO: { status: 500, exit: 1, remote: true, summary: 'a local file could not be read or written' },
  // what a service answers for a route it does not have, or for a bug of ours
  UNAUTHORIZED: {
    status: 401,
    exit: 1,
    remote: true,
    summary: 'a service wants the cluster credential (`WEIGHTCAST_CLUSTER_TOKEN`, `--cluster-token-file`)',
  },
  FORBIDDEN: {
    status: 403,
    exit: 1,
    remote: true,
    summary:
      'a service refused the request (an operator route for a member credential; the local API answers only this machine, and no web page)',
  },
  TLS_UNTRUSTED: {
    status: 500,
    exit: 2,
    summary: "a service's certificate is not signed by the CA given with `--tls-ca` (or names another host)",
  },
  NOT_FOUND: {
    status: 404,
    exit: 1,
    summary: 'a service has no such route (a client of another version, or a typo in a URL)',
  },
  INTERNAL: { status: 500, exit: 1, summary: 'a bug in weightcast: please report it with the message' },
} as const satisfies Record<string, ErrorEntry>;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_CATALOGUE, value);
}

/** The catalogue's entry for `code`. */
export function errorEntry(code: ErrorCode): ErrorEntry {
  return ERROR_CATALOGUE[code];
}

export interface ErrorDetails {
  /** The file (path or URL) the error is about, when there is one. */
  file?: string;
  /** The tensor the error is about, when there is one. */
  tensor?: string;
  [key: string]: unknown;
}

/**
 * Marks a WeightcastError whichever copy of this module made it. The build puts a command's usual
 * route in one file (scripts/bundle-commands.ts) and leaves the rest of the command to other files,
 * each holding its own copy of this module; an error thrown by one copy is still a WeightcastError
 * to another (`instanceof` reads the mark), so it keeps its code, exit status and JSON.
 */
const WEIGHTCAST_ERROR_MARK = Symbol.for('weightcast.error');

export class WeightcastError extends Error {
  static override [Symbol.hasInstance](value: unknown): boolean {
    return (
      typeof value === 'object' &&
      value !== null &&
      (value as { [WEIGHTCAST_ERROR_MARK]?: unknown })[WEIGHTCAST_ERROR_MARK] === true
    );
  }

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
Object.defineProperty(WeightcastError.prototype, WEIGHTCAST_ERROR_MARK, { value: true });

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
  // Errno names (ENOENT, ENOSPC, EAI_AGAIN); Node's own ERR_* codes are misuse, not I/O.
  if (typeof code !== 'string' || !code.startsWith('E') || code.startsWith('ERR_')) return error;
  const path = (error as { path?: unknown }).path;
  const details: ErrorDetails = { errno: code };
  if (typeof path === 'string') details.file = path;
  const message = error instanceof Error ? error.message : String(error);
  return new WeightcastError('IO', `${what}: ${message}`, details, { cause: error });
}

/**
 * Wraps the error of reading a file the user named: one that is not there (ENOENT, ENOTDIR) or is
 * a directory (EISDIR) is bad input (USAGE, exit 2), said plainly; anything else is an IO error
 * naming the file. `what` names the file's role ("the manifest").
 */
export function asInputFileError(error: unknown, what: string, path: string): WeightcastError {
  if (error instanceof WeightcastError) return error;
  const code = (error as { code?: unknown } | null)?.code;
  const details: ErrorDetails = typeof code === 'string' ? { file: path, errno: code } : { file: path };
  const options = { cause: error };
  if (code === 'ENOENT' || code === 'ENOTDIR')
    return new WeightcastError('USAGE', `${what} ${path} does not exist`, details, options);
  if (code === 'EISDIR')
    return new WeightcastError('USAGE', `${what} ${path} is a directory, not a file`, details, options);
  const message = error instanceof Error ? error.message : String(error);
  return new WeightcastError('IO', `cannot read ${what} ${path}: ${message}`, details, options);
}
