/**
 * `weightcast/seed`: the seed tier, a model's pieces spread over storage nodes. Put a model on the
 * nodes (`putModel`), read it back from all of them at once as an origin for `pull`
 * (`openSeedSource`), plan a re-layout (`planDistribute`, pure) and apply it crash-safely
 * (`applyDistribute`). The services: the catalog the scheduler serves (`CatalogStore`,
 * `catalogRoutes`) and a seed node (`SeedNode`); `CatalogClient` talks to the catalog.
 */

export { putModel, type PutEvent, type PutOptions, type PutResult } from './put/put.js';
export { openSeedSource } from './read/open.js';
export { SeedOrigin, type SeedOriginOptions, type SeedReadStats } from './read/seed-origin.js';
export {
  DISTRIBUTE_MODES,
  PLACEMENT_POLICIES,
  placePieces,
  planDistribute,
  renderPlanText,
  reportLayout,
  type CatalogSnapshot,
  type DistributeMode,
  type DistributeOptions,
  type DistributePlan,
  type LayoutReport,
  type Move,
  type PlacementPolicy,
} from './plan/index.js';
export {
  applyDistribute,
  type ApplyEvent,
  type ApplyOptions,
  type ApplyResult,
  type MoveOutcome,
} from './apply/apply.js';
export { CatalogClient } from './catalog/client.js';
export { CatalogStore, type CatalogOpenOptions } from './catalog/store.js';
export { catalogRoutes, type CatalogRoutes } from './catalog/routes.js';
export { SeedNode, type SeedNodeOptions } from './node/seed-node.js';
