/** The streaming materialiser's public surface. */

export { ArenaAllocator } from './arena.js';
export { HfOutput, HF_REQUESTS } from './hf-output.js';
export { loadTensors, openLoadStream, type LoadStreamOptions, type LoadTensorsOptions } from './load.js';
export {
  closeModelSource,
  findTensor,
  isSafetensorsPath,
  modelBytes,
  openModelSource,
  type ModelSource,
  type OpenModelOptions,
  type SafetensorsFileIndex,
} from './model-source.js';
export { planReads, type PlanOptions, type PlannedGroup, type ReadPlan } from './plan.js';
export {
  CONCURRENCY_DEFAULT,
  MEMORY_BYTES_DEFAULT,
  ReadStream,
  type ReadStreamOptions,
} from './read-stream.js';
export { describeTag, modelRequests, type LoadTag, type RequestChoice } from './requests.js';
export { SHM_REQUESTS, SHM_ROOT_DEFAULT, ShmOutput } from './shm-output.js';
export type {
  ByteRange,
  Delivered,
  LoadedTensor,
  ModelFile,
  ReadRequest,
  StreamStats,
  TensorInfo,
} from './types.js';
