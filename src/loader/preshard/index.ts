/** The pre-sharder's public surface: the pure layout, units, FP8 math and manifest, and the I/O shell. */

export {
  AmaxCache,
  Scratch,
  buildOutput,
  componentBytes,
  type BuiltOutput,
  type SourceBytes,
} from './build.js';
export {
  AMAX_MIN,
  E4M3_MAX,
  FP8_BLOCK,
  amaxOf,
  decodeE4m3,
  elementReader,
  encodeE4m3,
  encodeE4m3Bits,
  quantiseBlocks,
  quantiseRun,
  scaleFor,
} from './fp8.js';
export {
  PRESHARD_LAYOUTS,
  PRESHARD_QUANTISATIONS,
  planPreshardLayout,
  type LayoutOptions,
  type OutputComponent,
  type OutputEncoding,
  type OutputTensor,
  type PreshardLayout,
  type PreshardLayoutPlan,
  type PreshardQuantisation,
  type RankOutput,
} from './layout.js';
export {
  PRESHARD_MANIFEST_FORMAT,
  PRESHARD_MANIFEST_VERSION,
  encodePreshardManifest,
  type PreshardManifest,
  type PreshardManifestRank,
  type PreshardManifestSource,
  type PreshardManifestTensor,
} from './manifest.js';
export {
  FUSION_RULES,
  OUTPUT_MANIFEST_NAME,
  PRESHARD_MANIFEST_NAME,
  RANK_PART_PATTERN,
  fusionTarget,
  isQuantisableName,
  rankPartFileName,
  scaleName,
} from './naming.js';
export {
  outputConfig,
  preshard,
  type PreshardOptions,
  type PreshardRankResult,
  type PreshardResult,
} from './preshard.js';
export { checkMemory, planReadUnits, type MemoryPlan, type ReadUnits } from './units.js';
