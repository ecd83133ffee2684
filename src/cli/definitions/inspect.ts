/** `weightcast inspect`: flags and help; the work is in ../commands/inspect.ts, imported on run. */

import type { InspectFlags } from '../commands/inspect.js';
import { descriptionOf, type RegisterCommand } from './index.js';

export const registerInspect: RegisterCommand = (program, io, setExitCode) => {
  program
    .command('inspect')
    .description(descriptionOf('inspect'))
    .argument('<path>', 'a .safetensors file, or a directory of shards with model.safetensors.index.json')
    .option('--json', 'print one JSON object')
    .action(async (path: string, flags: InspectFlags) => {
      const { inspectCommand } = await import('../commands/inspect.js');
      setExitCode(await inspectCommand(path, flags, io));
    });
};
