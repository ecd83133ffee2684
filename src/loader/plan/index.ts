/** The public surface of parallelism plans: build a plan (pure), hash it into a plan manifest, read one back. */

export { buildParallelPlan, WEIGHTED_ROW_UNIT, type PlanInput } from './build.js';
export { expandRuns, runBytes, sliceRuns, sliceShape } from './byte-ranges.js';
export {
  CONFIG_FILE_NAME,
  buildPlanManifest,
  hashPlanSlices,
  readModelDirectory,
  readPlanManifest,
  readRankTensor,
  writePlanManifest,
  type ModelDirectory,
  type ReadPlanManifestOptions,
} from './files.js';
export { readPlanModel } from './model-config.js';
export {
  PLAN_MANIFEST_FORMAT,
  PLAN_MANIFEST_VERSION,
  TensorSliceHasher,
  checkSliceBytes,
  encodePlanManifest,
  parsePlanManifest,
  planManifestDigest,
  planManifestFrom,
  sliceKey,
  type PlanManifest,
  type PlanManifestRank,
  type PlanManifestTensor,
} from './plan-manifest.js';
export { tensorRule, type Home, type SplitAxis, type TensorRule } from './rules.js';
export { VOCAB_PADDING, apportion, padVocab, pipelineSpans } from './split-math.js';
export {
  PLAN_ARCHITECTURES,
  type ByteRun,
  type LatentAttention,
  type ParallelPlan,
  type ParallelismOptions,
  type PlanArchitecture,
  type PlanModel,
  type RankPlan,
  type RankTensor,
  type RankTotals,
  type SourceTensor,
  type TensorSlice,
} from './types.js';
