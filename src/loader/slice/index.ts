/** Slice-aware fetch: load one rank of a parallel layout, reading only the bytes its slices need. */

export {
  loadRank,
  type LoadRankOptions,
  type LoadRankResult,
  type SliceLoadEvent,
  type SliceVerification,
} from './load-rank.js';
export { RANK_DESCRIPTION_FILE, createSliceOutput, type SliceFormat, type SliceOutput } from './outputs.js';
export {
  firstLayerNames,
  layerOrder,
  modelOrder,
  sliceByteRanges,
  slicePhases,
  type SliceTag,
} from './requests.js';
export { openSliceOrigin, type SliceSourceOptions } from './source.js';
export { matchPlanManifest } from './verify.js';
