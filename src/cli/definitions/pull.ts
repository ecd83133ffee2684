/** `weightcast pull`: flags and help; the work is in ../commands/pull.ts, imported on run. */

import type { PullFlags } from '../commands/pull.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT } from '../../pull/defaults.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withAccessOptions, withOriginRetryOption, withTokenOption } from './shared.js';
import { AGENT_PORT_DEFAULT } from '../../swarm/agent/defaults.js';

/** Reads in flight per seed node for `--seeds` (measured: 4 per node fills 6 nodes' links). */
export const SEED_READS_PER_NODE = 4;

export const registerPull: RegisterCommand = (program, io, setExitCode) => {
  withOriginRetryOption(withAccessOptions(withTokenOption(program.command('pull')), 'client'))
    .description(descriptionOf('pull'))
    .argument('<src>', 'model directory, file:// or http(s):// URL')
    .requiredOption('--to <dir>', 'destination directory')
    .option('--manifest <file>', 'verify against this manifest (without it the origin is trusted)')
    .option('--digest <sha256>', 'refuse the manifest unless its digest is this')
    .option(
      '--concurrency <n>',
      `pieces fetched at once (default ${CONCURRENCY_DEFAULT}; with --seeds ${SEED_READS_PER_NODE} per seed node)`,
    )
    .option(
      '--memory-mb <mb>',
      'memory budget for pieces in flight',
      String(MEMORY_BYTES_DEFAULT / 1024 / 1024),
    )
    .option('--piece-size <size>', 'piece size when no manifest is given (default 16MiB)')
    .option('--scheduler <url>', 'join the swarm of this scheduler (this pull serves peers while it runs)')
    .option(
      '--agent <url>',
      `fetch through the swarm agent on this machine (default: $WEIGHTCAST_AGENT, else an agent on 127.0.0.1:${AGENT_PORT_DEFAULT} if one answers)`,
    )
    .option('--no-agent', 'do not look for a local agent: pull from the origin directly')
    .option(
      '--link',
      "through an agent that already holds the model in its cache: hard-link its files instead of copying them (same file system; do not modify them then, they are the agent's too)",
    )
    .option(
      '--seeds <url>',
      "read from the seed tier whose catalog this scheduler keeps; SRC is the model's digest",
    )
    .option(
      '--no-direct-io',
      'from the origin or with --scheduler: write through the page cache (default: O_DIRECT where the file system allows it: a copy of every byte saved, but the files are not left in the page cache; through an agent, the agent decides)',
    )
    .option('--listen <host:port>', 'with --scheduler: where this pull serves pieces to peers', '127.0.0.1:0')
    .option(
      '--insecure',
      'with --scheduler: serve peers on a non-loopback --listen without a cluster credential',
    )
    .option('--advertise <url>', 'with --scheduler: the URL peers use to reach this pull')
    .option('--upload-mbps <mbit/s>', 'with --scheduler: cap on what this pull sends to peers')
    .option('--download-mbps <mbit/s>', 'with --scheduler: cap on what this pull receives')
    .option('--json', 'JSON lines on stdout')
    .action(async (src: string, flags: PullFlags) => {
      const { runPull } = await import('../commands/pull.js');
      setExitCode(await runPull(src, flags, io));
    });
};
