/** `weightcast scheduler`: flags and help; the work is in ../commands/scheduler.ts, imported on run. */

import type { SchedulerFlags } from '../commands/scheduler.js';
import { SWARM_SERVICE_DEFAULTS } from '../../swarm/scheduler/defaults.js';
import { hedgeTailOption, ringParentsOption, transferUnitOption } from '../swarm-flags.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withAccessOptions, withServerLimitOptions } from './shared.js';

export const registerScheduler: RegisterCommand = (program, io, setExitCode) => {
  const command = withAccessOptions(program.command('scheduler'), 'service')
    .description(descriptionOf('scheduler'))
    .option('--port <port>', 'port to listen on (0 = any)', '7000')
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option(
      '--origin-readers <k>',
      'transfers allowed to read the origin at once',
      String(SWARM_SERVICE_DEFAULTS.originReaders),
    )
    .option(
      '--downloads <n>',
      'pieces each host downloads at once',
      String(SWARM_SERVICE_DEFAULTS.downloadsPerHost),
    )
    .option(
      '--uploads <n>',
      'pieces each host uploads at once',
      String(SWARM_SERVICE_DEFAULTS.uploadsPerHost),
    )
    .option(
      '--host-timeout-ms <ms>',
      'drop an agent not heard from for this long',
      String(SWARM_SERVICE_DEFAULTS.hostTimeoutMs),
    )
    .option('--seed <n>', 'seed of the scheduling tie-breaks', '1');
  ringParentsOption(command, SWARM_SERVICE_DEFAULTS.ringParents);
  transferUnitOption(command);
  withServerLimitOptions(command, 60);
  hedgeTailOption(command, SWARM_SERVICE_DEFAULTS.hedgeTailPieces)
    .option(
      '--ring-chain',
      'always one chain, however many hosts (by default: one chain while the swarm is short enough for the model, else per piece)',
    )
    .option('--per-piece', 'plan every piece for every host, never a chain')
    .option(
      '--ring-push',
      'ring mode (experimental): hosts form rings of up to 16 and push each piece on to the next, with no request or report per piece',
    )
    .option('--catalog <dir>', "keep the seed tier's catalog (placement maps) here and serve it")
    .option('--json', 'events as JSON lines on stdout')
    .action(async (flags: SchedulerFlags) => {
      const { schedulerCommand } = await import('../commands/scheduler.js');
      setExitCode(await schedulerCommand(flags, io));
    });
};
