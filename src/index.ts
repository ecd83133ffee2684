/**
 * The weightcast library: the same capabilities as the CLI, typed, ESM, every async call taking an
 * AbortSignal. See ARCHITECTURE.md for how the parts fit together.
 */

export { WeightcastError, isWeightcastError, type ErrorCode, type ErrorDetails } from './errors.js';

// safetensors and the Hugging Face index
export { DTYPES, DTYPE_BITS, dtypeBits, isDtype, type Dtype } from './format/dtype.js';
export {
  HEADER_BYTES_MAX,
  parseSafetensorsBuffer,
  parseSafetensorsHeader,
  readHeaderLength,
  readSafetensorsHeader,
  readSafetensorsHeaderFromFile,
  type RangeRead,
  type SafetensorsHeader,
  type TensorEntry,
} from './format/safetensors.js';
export {
  SafetensorsFileWriter,
  planSafetensorsLayout,
  type PlannedTensor,
  type SafetensorsLayout,
  type TensorSpec,
} from './format/safetensors-writer.js';
export {
  INDEX_FILE_NAME,
  indexShardFiles,
  parseIndexJson,
  readIndexJson,
  serializeIndexJson,
  writeIndexJson,
  type SafetensorsIndex,
} from './format/index-json.js';
export { summarizeModel, type InspectSummary } from './format/inspect.js';

// manifests
export {
  PIECE_SIZE_DEFAULT,
  defaultPieceSize,
  encodeManifest,
  loadManifest,
  manifestDigest,
  parseManifest,
  pieceCount,
  pieceRange,
  totalBytes,
  writeManifest,
  type Manifest,
  type ManifestFile,
  type ManifestTensor,
} from './manifest/manifest.js';
export { merkleProof, merkleRoot, verifyMerkleProof, type ProofStep } from './manifest/merkle.js';
export { buildManifest, type BuildManifestOptions } from './manifest/build.js';
export { verifyDirectory, type VerifyReport } from './manifest/verify.js';
export { HashPool } from './manifest/hash-pool.js';

// origins
export type { Origin, OriginEntry, OriginCallOptions, OriginStats } from './origin/origin.js';
export { LocalOrigin, type LocalOriginOptions } from './origin/local.js';
export { HttpOrigin, type HttpOriginOptions } from './origin/http.js';
export { openOrigin, type OpenOriginOptions } from './origin/open.js';
export { startFileServer, type FileServer, type FileServerOptions } from './origin/file-server.js';

// pull
export { pull, type PullEvent, type PullOptions, type PullResult } from './pull/pull.js';

// synthetic checkpoints
export { synthesizeModel, planSynth, type SynthOptions, type SynthResult } from './synth/index.js';
