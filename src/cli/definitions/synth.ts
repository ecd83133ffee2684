/** `weightcast synth`: flags and help; the work is in ../commands/synth.ts, imported on run. */

import type { SynthFlags } from '../commands/synth.js';
import { descriptionOf, type RegisterCommand } from './index.js';

export const registerSynth: RegisterCommand = (program, io, setExitCode) => {
  program
    .command('synth')
    .description(descriptionOf('synth'))
    .requiredOption('--to <dir>', 'directory to write into (created if missing)')
    .option('--arch <arch>', 'llama, qwen2-moe or deepseek-v3', 'llama')
    .option('--dtype <dtype>', 'bf16, f16, f32 or f8_e4m3', 'bf16')
    .option(
      '--size-mb <mb>',
      'total tensor size in MiB; dimensions not given are chosen to match (default 64)',
    )
    .option('--layers <n>', 'number of decoder layers')
    .option('--hidden <n>', 'hidden size')
    .option('--experts <n>', 'routed experts per MoE layer (qwen2-moe, deepseek-v3)')
    .option('--heads <n>', 'attention heads')
    .option('--vocab <n>', 'vocabulary size')
    .option('--shards <n>', 'number of safetensors shards (default: about 2 GiB each)')
    .option('--seed <n>', 'seed for the tensor contents', '0')
    .option('--json', 'print one JSON object instead of a summary')
    .action(async (flags: SynthFlags) => {
      const { runSynth } = await import('../commands/synth.js');
      setExitCode(await runSynth(flags, io));
    });
};
