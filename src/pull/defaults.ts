/**
 * The pull's defaults on their own, with no imports, so that `weightcast pull --help` can show them
 * without loading the pull itself.
 */

export const CONCURRENCY_DEFAULT = 4;
export const MEMORY_BYTES_DEFAULT = 192 * 1024 * 1024;
