/**
 * The pull's defaults on their own, with no imports, so that `weightcast pull --help` can show them
 * without loading the pull itself.
 */

export const CONCURRENCY_DEFAULT = 4;
export const MEMORY_BYTES_DEFAULT = 192 * 1024 * 1024;
/**
 * Fetches of a piece whose bytes failed verification before the origin is given up on (so it is
 * sent wrong up to this + 1 times): a pull's default, and what a swarm member allows the origin too.
 */
export const PIECE_RETRIES_DEFAULT = 3;
