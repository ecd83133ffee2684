/**
 * `weightcast/loader`: tensors from an origin into memory or files, verified and within a memory
 * budget. `loadTensors` yields them one by one; `loadModel` writes a whole model out (`hf` files or
 * `shm`); `loadRank` loads one rank of a tensor/pipeline/expert-parallel layout, reading only its
 * slices; `buildParallelPlan` says what each rank holds; `preshard` writes per-rank files ahead of time.
 */

export {
  PART_BYTES_DEFAULT,
  loadModel,
  type LoadModelEvent,
  type LoadModelOptions,
  type LoadModelResult,
  type ModelFormat,
} from './stream/load-model.js';
export { loadTensors, type LoadTensorsOptions } from './stream/load.js';
export { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT, SHM_ROOT_DEFAULT } from './stream/defaults.js';
export type { LoadedTensor, StreamStats, TensorInfo } from './stream/types.js';
export {
  loadRank,
  type LoadRankOptions,
  type LoadRankResult,
  type SliceLoadEvent,
  type SliceVerification,
} from './slice/load-rank.js';
export type { SliceFormat } from './slice/outputs.js';
export { buildParallelPlan, type PlanInput } from './plan/build.js';
export {
  buildPlanManifest,
  readModelDirectory,
  readPlanManifest,
  writePlanManifest,
  type ModelDirectory,
  type ReadPlanManifestOptions,
} from './plan/files.js';
export { planManifestDigest, type PlanManifest } from './plan/plan-manifest.js';
export {
  PLAN_ARCHITECTURES,
  type ParallelPlan,
  type ParallelismOptions,
  type PlanArchitecture,
  type RankPlan,
  type RankTensor,
  type TensorSlice,
} from './plan/types.js';
export {
  preshard,
  type PreshardOptions,
  type PreshardRankResult,
  type PreshardResult,
} from './preshard/preshard.js';
export type { PreshardLayout, PreshardQuantisation } from './preshard/layout.js';
