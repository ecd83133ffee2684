/**
 * The swarm core's public surface: the SwarmCore state machine and the vocabulary it speaks.
 * Everything under this folder is pure (no I/O, no clock, no unseeded randomness).
 */

export { SwarmCore, HOSTS_MAX } from './swarm-core.js';
export { HEDGE_TAIL_PIECES_DEFAULT, ORIGIN, RING_PARENTS_DEFAULT } from './types.js';
export type {
  Assignment,
  HostId,
  HostSpec,
  SwarmConfig,
  SwarmStats,
  TransferOutcome,
  TransferReport,
} from './types.js';
