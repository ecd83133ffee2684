/** `weightcast pull`: flags and help; the work is in ../commands/pull.ts, imported on run. */

import type { PullFlags } from '../commands/pull.js';
import type { CommandSpec } from '../command-spec.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT } from '../../pull/defaults.js';
import { registerSpec } from './index.js';
import { ORIGIN_RETRY_OPTIONS, TOKEN_OPTIONS, accessOptions } from './shared.js';
import { AGENT_PORT_DEFAULT } from '../../swarm/agent/defaults.js';

/** Reads in flight per seed node for `--seeds` (measured: 4 per node fills 6 nodes' links). */
export const SEED_READS_PER_NODE = 4;

export const PULL_COMMAND: CommandSpec = {
  name: 'pull',
  args: [{ term: '<src>', description: 'model directory, file:// or http(s):// URL' }],
  options: [
    ...TOKEN_OPTIONS,
    ...accessOptions('client'),
    ...ORIGIN_RETRY_OPTIONS,
    { flags: '--to <dir>', description: 'destination directory', required: true },
    {
      flags: '--manifest <file>',
      description: 'verify against this manifest (without it the origin is trusted)',
    },
    { flags: '--digest <sha256>', description: 'refuse the manifest unless its digest is this' },
    {
      flags: '--concurrency <n>',
      description: `pieces fetched at once (default ${CONCURRENCY_DEFAULT}; with --seeds ${SEED_READS_PER_NODE} per seed node)`,
    },
    {
      flags: '--memory-mb <mb>',
      description: 'memory budget for pieces in flight',
      default: String(MEMORY_BYTES_DEFAULT / 1024 / 1024),
    },
    { flags: '--piece-size <size>', description: 'piece size when no manifest is given (default 16MiB)' },
    {
      flags: '--scheduler <url>',
      description: 'join the swarm of this scheduler (this pull serves peers while it runs)',
    },
    {
      flags: '--agent <url>',
      description: `fetch through the swarm agent on this machine (default: $WEIGHTCAST_AGENT, else an agent on 127.0.0.1:${AGENT_PORT_DEFAULT} if one answers)`,
    },
    { flags: '--no-agent', description: 'do not look for a local agent: pull from the origin directly' },
    {
      flags: '--link',
      description:
        "through an agent that already holds the model in its cache: hard-link its files instead of copying them (same file system; do not modify them then, they are the agent's too)",
    },
    {
      flags: '--seeds <url>',
      description: "read from the seed tier whose catalog this scheduler keeps; SRC is the model's digest",
    },
    {
      flags: '--no-direct-io',
      description:
        'from the origin or with --scheduler: write through the page cache (default: O_DIRECT where the file system allows it: a copy of every byte saved, but the files are not left in the page cache; through an agent, the agent decides)',
    },
    {
      flags: '--listen <host:port>',
      description: 'with --scheduler: where this pull serves pieces to peers',
      default: '127.0.0.1:0',
    },
    {
      flags: '--insecure',
      description: 'with --scheduler: serve peers on a non-loopback --listen without a cluster credential',
    },
    { flags: '--advertise <url>', description: 'with --scheduler: the URL peers use to reach this pull' },
    {
      flags: '--upload-mbps <mbit/s>',
      description: 'with --scheduler: cap on what this pull sends to peers',
    },
    { flags: '--download-mbps <mbit/s>', description: 'with --scheduler: cap on what this pull receives' },
    { flags: '--json', description: 'JSON lines on stdout' },
  ],
  async run(args, flags, io) {
    const { runPull } = await import('../commands/pull.js');
    return runPull(args[0] ?? '', flags as unknown as PullFlags, io);
  },
};

export const registerPull = registerSpec(PULL_COMMAND);
