/** `weightcast sim`: flags and help; the work is in ../commands/sim.ts, imported on run. */

import type { SimFlags } from '../commands/sim.js';
import {
  HEDGE_TAIL_PIECES_DEFAULT,
  ORIGIN_READERS_DEFAULT,
  RING_MEMBERS_MAX_DEFAULT,
  RING_PARENTS_DEFAULT,
} from '../../swarm/core/types.js';
import { hedgeTailOption, ringParentsOption } from '../swarm-flags.js';
import { descriptionOf, type RegisterCommand } from './index.js';

export const registerSim: RegisterCommand = (program, io, setExitCode) => {
  const command = program
    .command('sim')
    .description(descriptionOf('sim'))
    .option('--hosts <n>', 'hosts that want the model', '100')
    .option('--size-gb <gb>', 'model size in GB (10^9 bytes)', '10')
    .option('--piece-mb <mb>', 'piece size in MiB', '16')
    .option('--host-mbps <mbps>', 'each host’s upload and download, Mbit/s', '10000')
    .option('--origin-mbps <mbps>', 'the origin’s upload, Mbit/s', '10000')
    .option('--racks <n>', 'spread hosts over this many racks (0: none)', '0')
    .option(
      '--rack-uplink-mbps <mbps>',
      'capacity of each rack uplink, each direction, Mbit/s (default: unconstrained)',
    )
    .option('--latency-ms <ms>', 'request latency before a transfer’s first byte', '0.5')
    .option('--fail-hosts <n>', 'hosts that fail during the run', '0')
    .option(
      '--scheduler-loss-s <s>',
      'the scheduler goes away this many seconds in: every host fetches on with the agents’ fallback policy',
    )
    .option('--liars <n>', 'hosts that report every piece from a peer as corrupt (made-up blame)', '0')
    .option('--corrupt-hosts <n>', 'hosts that upload corrupt bytes of every piece', '0')
    .option('--seed <n>', 'random seed; the same seed gives the same run', '1')
    .option('--downloads <n>', 'pieces a host downloads at once', '4')
    .option('--uploads <n>', 'pieces a host uploads at once', '4')
    .option(
      '--origin-readers <n>',
      'transfers the origin serves at once (the scheduler’s default)',
      String(ORIGIN_READERS_DEFAULT),
    );
  hedgeTailOption(command, HEDGE_TAIL_PIECES_DEFAULT);
  ringParentsOption(command, RING_PARENTS_DEFAULT)
    .option(
      '--ring-push',
      'ring mode: hosts form a ring and push each piece on to the next; the scheduler plans first copies and stalled links only',
    )
    .option(
      '--ring-chain',
      'always one chain, however many hosts (by default, as the scheduler: one chain while the swarm is short enough for the model, else per piece)',
    )
    .option('--per-piece', 'plan every piece for every host, never a chain')
    .option(
      '--ring-members <n>',
      `ring mode: hosts in one ring (default ${RING_MEMBERS_MAX_DEFAULT}) or chain (default: all, one chain) at most`,
    )
    .option(
      '--ring-store-forward',
      'ring mode: a host stores a pushed piece before pushing it on (default: passes it on as it arrives, as agents do)',
    )
    .option('--json', 'print one JSON object')
    .action(async (flags: SimFlags) => {
      const { simCommand } = await import('../commands/sim.js');
      setExitCode(simCommand(flags, io));
    });
};
