/**
 * `weightcast/pull`: the verified, resumable, memory-bounded pull of a model from one origin into a
 * directory, and the origins it reads from (a directory, `file://`, `http(s)://`, a hub's
 * `/resolve/<revision>/` URL). Through the swarm instead: `weightcast/swarm`.
 */

export {
  CONCURRENCY_DEFAULT,
  MEMORY_BYTES_DEFAULT,
  PIECE_RETRIES_DEFAULT,
  pull,
  type PullEvent,
  type PullOptions,
  type PullResult,
} from './pull.js';
export { openOrigin, type OpenOriginOptions } from '../origin/open.js';
export type { Origin, OriginCallOptions, OriginEntry, OriginStats } from '../origin/origin.js';
export { LocalOrigin, type LocalOriginOptions } from '../origin/local.js';
export { HttpOrigin, type HttpOriginOptions } from '../origin/http.js';
