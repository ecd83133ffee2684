/** `weightcast preshard`: flags and help; the work is in ../commands/preshard.ts, imported on run. */

import type { PreshardFlags } from '../commands/preshard.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT } from '../../loader/stream/defaults.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withTokenOption } from './shared.js';

const MiB = 1024 * 1024;

export const registerPreshard: RegisterCommand = (program, io, setExitCode) => {
  const command = withTokenOption(program.command('preshard'))
    .description(descriptionOf('preshard'))
    .argument('<src>', 'model directory, file:// or http(s):// URL')
    .requiredOption('--tp <n>', 'tensor-parallel ranks per stage')
    .option('--pp <n>', 'pipeline stages', '1')
    .requiredOption('--to <dir>', 'output directory (new, empty, or an earlier pre-shard output)')
    .option('--quantize <scheme>', 'fp8: F8_E4M3 linear weights with per-tensor or 128x128 block scales')
    .option('--layout <layout>', "hf (the checkpoint's names) or vllm (fused qkv_proj, gate_up_proj)", 'hf')
    .option(
      '--memory-mb <mb>',
      'memory budget for read buffers and outputs being built',
      String(MEMORY_BYTES_DEFAULT / MiB),
    )
    .option(
      '--concurrency <n>',
      'ranged reads in flight (1: byte-for-byte reproducible part files)',
      String(CONCURRENCY_DEFAULT),
    )
    .option(
      '--manifest <file>',
      "verify every byte read against the source's manifest (else the origin is trusted)",
    )
    .option('--digest <sha256>', 'refuse the manifest unless its digest is this')
    .option('--no-output-manifest', 'skip the weightcast manifest of the output directory')
    .option('--json', 'one JSON summary on stdout');
  // Tests split parts at a few KiB; nobody else needs to see the knob.
  command.addOption(
    command.createOption('--part-mb <mb>', 'tensor MiB per part file (default 5 GiB)').hideHelp(),
  );
  command.action(async (src: string, flags: PreshardFlags) => {
    const { preshardCommand } = await import('../commands/preshard.js');
    setExitCode(await preshardCommand(src, flags, io));
  });
};
