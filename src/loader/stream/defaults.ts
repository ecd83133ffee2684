/**
 * The stream loader's defaults on their own, with no imports, so that the CLI's help for `load` and
 * `preshard` can show them without loading the loader.
 */

const MiB = 1024 * 1024;
export const MEMORY_BYTES_DEFAULT = 512 * MiB;
export const CONCURRENCY_DEFAULT = 4;
export const SHM_ROOT_DEFAULT = '/dev/shm/weightcast';
