/** `weightcast manifest`: flags and help; the work is in ../commands/manifest.ts, imported on run. */

import type { ManifestFlags } from '../commands/manifest.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withOriginRetryOption, withTokenOption } from './shared.js';

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
    .option('--threads <n>', 'hash threads (default: one per core)')
    .option('--json', 'print a JSON summary')
    .action(async (src: string, flags: ManifestFlags) => {
      const { manifestCommand } = await import('../commands/manifest.js');
      setExitCode(await manifestCommand(src, flags, io));
    });
};
