/**
 * The scheduler's options and their defaults, apart from the service itself: `weightcast scheduler
 * --help` shows them without loading the scheduler. Imports only the core's vocabulary (types.ts),
 * which has no imports of its own.
 */

import { HEDGE_TAIL_PIECES_DEFAULT, ORIGIN_READERS_DEFAULT, RING_PARENTS_DEFAULT } from '../core/types.js';

export interface SwarmServiceOptions {
  /** At most this many transfers read the origin at once (`--origin-readers`). */
  originReaders: number;
  /** Upload rate the core assumes for the origin when planning (it only ranks, never limits). */
  originBytesPerSecond: number;
  downloadsPerHost: number;
  uploadsPerHost: number;
  /** A host not heard from for this long is dropped and its transfers re-planned. */
  hostTimeoutMs: number;
  randomSeed: number;
  /** SwarmConfig.ringParents (0 = off). */
  ringParents: number;
  /** SwarmConfig.hedgeTailPieces: a host's last this many pieces may be hedged (0 = never). */
  hedgeTailPieces: number;
  /**
   * Pieces per transfer unit (transfer-units.ts); undefined: chosen per model, units of at least
   * TRANSFER_UNIT_BYTES_DEFAULT while the model keeps UNITS_MIN of them; 1: every piece alone.
   */
  transferUnitPieces?: number | undefined;
  /**
   * Ring mode (core/ring-plan.ts, `--ring-push`): hosts form rings and push pieces along them; the
   * core plans first copies, ring entries and stalled links only. Pieces then move one at a time
   * (transfer units of 1).
   */
  ringPush?: boolean;
  /** Ring mode as chains (`--ring-chain`): each ring's head takes the model per piece, the rest are fed. */
  ringChain?: boolean;
  /**
   * The scheduler's default: one chain while the swarm is short enough (ring-plan.ts
   * `autoChainMembersMax`), per piece for every host once it grows past that, and for a model too
   * small for a chain of two. Overrides ringPush and ringChain.
   */
  ringAuto?: boolean;
}

export const SWARM_SERVICE_DEFAULTS: SwarmServiceOptions = {
  originReaders: ORIGIN_READERS_DEFAULT,
  originBytesPerSecond: 1.25e9,
  downloadsPerHost: 4,
  uploadsPerHost: 4,
  hostTimeoutMs: 10_000,
  randomSeed: 1,
  ringParents: RING_PARENTS_DEFAULT,
  hedgeTailPieces: HEDGE_TAIL_PIECES_DEFAULT,
  transferUnitPieces: undefined,
  ringPush: false,
  ringChain: false,
  // The library plans per piece unless asked; `weightcast scheduler` asks for auto unless told otherwise.
  ringAuto: false,
};
