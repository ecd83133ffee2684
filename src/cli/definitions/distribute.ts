/** `weightcast distribute`: flags and help; the work is in ../commands/distribute.ts, imported on run. */

import { Option } from 'commander';
import type { DistributeFlags } from '../commands/distribute.js';
import { DISTRIBUTE_MODES } from '../../seed/plan/types.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withAccessOptions } from './shared.js';

export const registerDistribute: RegisterCommand = (program, io, setExitCode) => {
  withAccessOptions(program.command('distribute'), 'operator')
    .description(descriptionOf('distribute'))
    .argument('<model>', "the model's digest, sha256:<hex>")
    .requiredOption('--scheduler <url>', 'the scheduler that keeps the catalog')
    .option('--mode <mode>', DISTRIBUTE_MODES.join(' | '), 'primary')
    .option('--nodes <k>', 'use this many nodes (those holding most first); default every active node')
    .option('--apply', 'carry the plan out (copy, verify, commit, delete after the grace period)')
    .option('--json', 'the plan as JSON; with --apply, JSON lines')
    .option('--state <dir>', 'where the move journal and lock live (default ~/.weightcast/distribute)')
    .option(
      '--grace-ms <ms>',
      'keep an old copy this long after its commit, for readers of the old map',
      '15000',
    )
    .option('--moves <n>', 'moves in flight at once', '8')
    .option('--node-moves <n>', 'moves touching one node at once', '2')
    .option('--node-mbps <mbit/s>', "cap on one node's move traffic")
    .option('--no-file-hashes', 'skip reading the model back for the before/after whole-file hashes')
    // Fault injection for tests: kill this process (SIGKILL) at the N-th time STEP is reached.
    .addOption(new Option('--crash-after <step:n>').hideHelp())
    .action(async (model: string, flags: DistributeFlags) => {
      const { distributeCommand } = await import('../commands/distribute.js');
      setExitCode(await distributeCommand(model, flags, io));
    });
};
