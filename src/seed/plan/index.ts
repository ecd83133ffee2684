/**
 * The seed tier's placement planner (pure): initial placement for `put`, the layout report, the
 * `distribute` planner with its dry-run text and JSON, and the catalog's commit rule for checking a
 * plan. What a CLI or the apply step needs is exported here.
 */

export {
  DISTRIBUTE_MODES,
  PLACEMENT_POLICIES,
  READ_WINDOWS_DEFAULT,
  SEED_NODES_MAX,
  SEED_PIECES_MAX,
  type CatalogSnapshot,
  type DistributeMode,
  type Move,
  type MoveKind,
  type PieceHolding,
  type PlacementPolicy,
  type SeedNode,
} from './types.js';
export { isPlacementPolicy, placePieces, placeSnapshot, type PlacementOptions } from './place.js';
export { reportLayout, type LayoutReport, type NodeLoad, type WindowStat } from './report.js';
export {
  applyMoves,
  isDistributeMode,
  planDistribute,
  type DistributeOptions,
  type DistributePlan,
  type MoveCounts,
  type RotationChoice,
} from './distribute.js';
export { planToJson, renderPlanJson, renderPlanText, type RenderOptions } from './render.js';
export { assignmentCost, solveAssignment } from './assignment.js';
