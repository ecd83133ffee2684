/**
 * The weightcast library's main entry: errors, the safetensors format, origins, synthetic
 * checkpoints, and (as in `weightcast/manifest` and `weightcast/pull`) manifests and the pull. The
 * other parts have their own entries: `weightcast/loader`, `weightcast/swarm`, `weightcast/seed`.
 * Every async call takes an AbortSignal. See ARCHITECTURE.md for how the parts fit together.
 */

export {
  ERROR_CATALOGUE,
  WeightcastError,
  isWeightcastError,
  type ErrorCode,
  type ErrorDetails,
} from './errors.js';

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
  serializeIndexJson,
  type SafetensorsIndex,
} from './format/index-json.js';
export { readIndexJson, writeIndexJson } from './format/index-json-file.js';
export { summarizeModel, type InspectSummary } from './format/inspect.js';

// manifests, origins and the pull
export * from './manifest/index.js';
export * from './pull/index.js';
export { startFileServer, type FileServer, type FileServerOptions } from './origin/file-server.js';

// synthetic checkpoints
export { synthesizeModel, planSynth, type SynthOptions, type SynthResult } from './synth/index.js';
