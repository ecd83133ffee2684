/** `weightcast plan`: flags and help; the work is in ../commands/plan.ts, imported on run. */

import type { PlanFlags } from '../commands/plan.js';
import { descriptionOf, type RegisterCommand } from './index.js';

export const registerPlan: RegisterCommand = (program, io, setExitCode) => {
  program
    .command('plan')
    .description(descriptionOf('plan'))
    .argument('<src>', 'a local model directory (config.json and safetensors shards)')
    .requiredOption('--tp <n>', 'tensor-parallel ranks per stage')
    .option('--pp <n>', 'pipeline stages', '1')
    .option('--ep <n>', 'expert-parallel groups per stage (divides tp or is a multiple of it)', '1')
    .option('--weights <list>', 'relative sizes of the tp ranks, e.g. 3,1 (default: even)')
    .option('--rank <r>', 'show only this rank')
    .option('--replicate-unknown', 'replicate tensors no rule covers (with a warning) instead of failing')
    .option('--hash', 'read every slice and write a plan manifest with its SHA-256 (needs --out)')
    .option('--out <file>', 'where --hash writes the plan manifest')
    .option('--json', 'print one JSON object')
    .action(async (src: string, flags: PlanFlags) => {
      const { planCommand } = await import('../commands/plan.js');
      setExitCode(await planCommand(src, flags, io));
    });
};
