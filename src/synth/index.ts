/** The public surface of synthetic checkpoints: plan a model (pure) or write one. */

export {
  SYNTH_ARCHS,
  SYNTH_DTYPES,
  deriveDims,
  describeModel,
  modelConfig,
  modelTensorBytes,
  modelTensors,
  type DeepseekV3Dims,
  type DimChoices,
  type LlamaDims,
  type ModelDims,
  type Qwen2MoeDims,
  type SynthArch,
  type SynthDtype,
  type SynthTensor,
} from './architectures.js';
export {
  SIZE_BYTES_DEFAULT,
  parseArch,
  parseDtype,
  planSynth,
  type SynthOptions,
  type SynthPlan,
} from './plan.js';
export { assignShards, defaultShardCount, shardFileName } from './sharding.js';
export { chooseDims, type SizeRequest } from './sizing.js';
export {
  synthesizeModel,
  type SynthFile,
  type SynthProgress,
  type SynthResult,
  type SynthRunOptions,
} from './synth.js';
export { ValueGenerator, type ValueDtype, type ValueRole } from './values.js';
