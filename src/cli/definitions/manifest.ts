/** `weightcast manifest`: flags and help; the work is in ../commands/manifest.ts, imported on run. */

import { availableParallelism } from 'node:os';
import type { ManifestFlags } from '../commands/manifest.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withOriginRetryOption, withTokenOption } from './shared.js';

/**
 * Hashing is CPU-bound: threads beyond the cores gain nothing and each costs a worker's memory (200
 * threads took 1.8 GB on 2 cores), so --threads above this many per core is refused.
 */
export const HASH_THREADS_PER_CORE_MAX = 4;

export function hashThreadsMax(): number {
  return HASH_THREADS_PER_CORE_MAX * availableParallelism();
}

export const registerManifest: RegisterCommand = (program, io, setExitCode) => {
  withOriginRetryOption(withTokenOption(program.command('manifest')))
    .description(descriptionOf('manifest'))
    .argument('<src>', 'model directory, safetensors file, file:// or http(s):// URL')
    .option(
      '--piece-size <size>',
      'piece size (e.g. 16MiB, 512KiB; default: at least 512 pieces, within 256KiB-16MiB)',
    )
    .option('--out <file>', 'write the manifest here (default: stdout)')
    .option(
      '--file-sha256',
      'also record each file’s whole SHA-256 (sha256sum-compatible; costs a second hash pass)',
    )
    .option(
      '--threads <n>',
      `hash threads (default: one per core; at most ${HASH_THREADS_PER_CORE_MAX} per core, ${hashThreadsMax()} here)`,
    )
    .option('--json', 'print a JSON summary')
    .action(async (src: string, flags: ManifestFlags) => {
      const { manifestCommand } = await import('../commands/manifest.js');
      setExitCode(await manifestCommand(src, flags, io));
    });
};
