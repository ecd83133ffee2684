/** `weightcast load`: flags and help; the work is in ../commands/load.ts, imported on run. */

import type { LoadFlags } from '../commands/load.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT, SHM_ROOT_DEFAULT } from '../../loader/stream/defaults.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withTokenOption } from './shared.js';

const MiB = 1024 * 1024;

export const registerLoad: RegisterCommand = (program, io, setExitCode) => {
  withTokenOption(program.command('load'))
    .description(descriptionOf('load'))
    .argument('<src>', 'model directory, file:// or http(s):// URL')
    .option('--to <dir>', `output directory (shm default: ${SHM_ROOT_DEFAULT}/<name>)`)
    .option(
      '--format <format>',
      'hf (original files, byte-identical; a rank: its slices in files named like the source), shm (safetensors in shared memory) or sharded-state (a rank as vLLM model-rank-R-part-P files)',
      'shm',
    )
    .option('--tp <n>', 'load one rank of this many tensor-parallel ranks (slice-aware fetch)')
    .option('--rank <r>', 'the rank to load (within --stage when given, else global)')
    .option('--pp <n>', 'pipeline stages (default 1)')
    .option('--stage <s>', 'the pipeline stage of --rank')
    .option('--ep <n>', 'expert-parallel groups per stage (default 1)')
    .option('--weights <list>', 'relative sizes of the tp ranks, e.g. 3,1 (default: even)')
    .option('--replicate-unknown', 'replicate tensors no plan rule covers instead of failing')
    .option('--plan-manifest <file>', 'fetch exactly the slices and check each against this plan manifest')
    .option('--plan-digest <sha256>', 'refuse the plan manifest unless its digest is this')
    .option('--agent <url>', 'read through the weightcast agent on this machine (needs --manifest)')
    .option('--order <order>', 'slice reads: model (first layer first, default) or file (one stream)')
    .option('--part-mb <mb>', `sharded-state: MiB of tensors per part file (default ${5 * 1024})`)
    .option(
      '--memory-mb <mb>',
      'memory budget for bytes in flight and not yet written',
      String(MEMORY_BYTES_DEFAULT / MiB),
    )
    .option('--concurrency <n>', 'ranged reads in flight', String(CONCURRENCY_DEFAULT))
    .option(
      '--manifest <file>',
      'verify every piece against this manifest (without it the origin is trusted)',
    )
    .option('--digest <sha256>', 'refuse the manifest unless its digest is this')
    .option('--json', 'one JSON summary on stdout')
    .action(async (src: string, flags: LoadFlags) => {
      const { loadCommand } = await import('../commands/load.js');
      setExitCode(await loadCommand(src, flags, io));
    });
};
