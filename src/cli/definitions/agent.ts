/** `weightcast agent`: flags and help; the work is in ../commands/agent.ts, imported on run. */

import { Option } from 'commander';
import type { AgentFlags } from '../commands/agent.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withAccessOptions, withOriginRetryOption, withServerLimitOptions } from './shared.js';
import { AGENT_PORT_DEFAULT } from '../../swarm/agent/defaults.js';

export const registerAgent: RegisterCommand = (program, io, setExitCode) => {
  const command = withAccessOptions(program.command('agent'), 'service')
    .description(descriptionOf('agent'))
    .requiredOption('--scheduler <url>', 'the scheduler, e.g. http://10.0.0.1:7000')
    .requiredOption(
      '--cache <dir>',
      'where verified pieces are kept (a restart resumes from here; one agent per cache)',
    )
    .option('--port <port>', 'port for peers and local pulls (0 = any)', String(AGENT_PORT_DEFAULT))
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--advertise <url>', 'URL peers should use to reach this agent (default: the listening address)')
    .option('--name <name>', 'name in the swarm (default: kept in the cache)')
    .option('--zone <zone>', 'locality label: peers in the same zone are preferred')
    .option('--rack <rack>', 'locality label: peers in the same rack are preferred most')
    .option('--upload-mbps <mbit/s>', 'cap on what this agent sends to peers')
    .option('--download-mbps <mbit/s>', 'cap on what this agent receives')
    .option('--uploads <n>', 'piece uploads at once; more requests are told to come back', '8')
    .option(
      '--recent-mb <MiB>',
      'memory for the pieces verified last, which peers and local reads are served from without reading the disk (default: 32 pieces of the largest-piece model, 16-256 MiB; 0: none)',
    )
    .option(
      '--destination-root <dir>',
      "a pull's destination under DIR is written by the agent directly (no copy); repeatable. Any process that reaches the local API can then have this agent write a model there, so name only model directories",
      (dir: string, dirs: string[]) => [...dirs, dir],
      [] as string[],
    )
    .option(
      '--no-direct-io',
      'write and read pieces through the page cache (default: O_DIRECT where the file system allows it, which saves a copy of every byte but leaves the files out of the page cache)',
    )
    // Fault injection for tests and demos: this agent serves wrong bytes on purpose.
    .addOption(new Option('--inject-corrupt-uploads').hideHelp())
    .addOption(
      new Option(
        '--role <role>',
        'swarm: fetch models for this host; seed: also hold pieces for the seed tier',
      )
        .choices(['swarm', 'seed'])
        .default('swarm'),
    )
    // Fault injection for tests: as a seed node, store every piece with one byte flipped.
    .addOption(new Option('--inject-seed-corrupt-stores').hideHelp());
  withOriginRetryOption(withServerLimitOptions(command, 30))
    .option('--json', 'events as JSON lines on stdout')
    .action(async (flags: AgentFlags) => {
      const { agentCommand } = await import('../commands/agent.js');
      setExitCode(await agentCommand(flags, io));
    });
};
