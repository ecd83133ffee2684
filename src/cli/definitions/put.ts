/** `weightcast put`: flags and help; the work is in ../commands/put.ts, imported on run. */

import type { PutFlags } from '../commands/put.js';
import { PLACEMENT_POLICIES } from '../../seed/plan/types.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withAccessOptions, withOriginRetryOption, withTokenOption } from './shared.js';

export const registerPut: RegisterCommand = (program, io, setExitCode) => {
  withOriginRetryOption(withAccessOptions(withTokenOption(program.command('put')), 'operator'))
    .description(descriptionOf('put'))
    .argument('<src>', 'model directory, file:// or http(s):// URL')
    .requiredOption('--scheduler <url>', 'the scheduler that keeps the catalog (started with --catalog)')
    .option('--placement <policy>', `${PLACEMENT_POLICIES.join(' | ')}`, 'round-robin')
    .option('--replicas <r>', 'extra copies of every piece beyond the primary', '0')
    .option('--manifest <file>', 'the model manifest (without it one is built from the origin, trusting it)')
    .option(
      '--piece-size <size>',
      'piece size when no manifest is given (default: at least 512 pieces, within 256KiB-16MiB)',
    )
    .option('--concurrency <n>', 'pieces read from the origin at once', '4')
    .option('--node-uploads <n>', 'uploads to one seed node at once', '2')
    .option('--seed <n>', 'seed of the balanced placement tie-breaks', '1')
    .option('--json', 'JSON lines on stdout')
    .action(async (src: string, flags: PutFlags) => {
      const { putCommand } = await import('../commands/put.js');
      setExitCode(await putCommand(src, flags, io));
    });
};
