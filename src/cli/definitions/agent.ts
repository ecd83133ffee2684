/** `weightcast agent`: flags and help; the work is in ../commands/agent.ts, imported on run. */

import type { AgentFlags } from '../commands/agent.js';
import type { CommandSpec } from '../command-spec.js';
import { registerSpec } from './index.js';
import { ORIGIN_RETRY_OPTIONS, accessOptions, serverLimitOptions } from './shared.js';
import { AGENT_PORT_DEFAULT } from '../../swarm/agent/defaults.js';

export const AGENT_COMMAND: CommandSpec = {
  name: 'agent',
  args: [],
  options: [
    ...accessOptions('service'),
    {
      flags: '--scheduler <url>',
      description: 'the scheduler, e.g. http://10.0.0.1:7000',
      required: true,
    },
    {
      flags: '--cache <dir>',
      description: 'where verified pieces are kept (a restart resumes from here; one agent per cache)',
      required: true,
    },
    {
      flags: '--port <port>',
      description: 'port for peers and local pulls (0 = any)',
      default: String(AGENT_PORT_DEFAULT),
    },
    { flags: '--host <address>', description: 'address to listen on', default: '127.0.0.1' },
    {
      flags: '--advertise <url>',
      description: 'URL peers should use to reach this agent (default: the listening address)',
    },
    { flags: '--name <name>', description: 'name in the swarm (default: kept in the cache)' },
    { flags: '--zone <zone>', description: 'locality label: peers in the same zone are preferred' },
    { flags: '--rack <rack>', description: 'locality label: peers in the same rack are preferred most' },
    { flags: '--upload-mbps <mbit/s>', description: 'cap on what this agent sends to peers' },
    { flags: '--download-mbps <mbit/s>', description: 'cap on what this agent receives' },
    {
      flags: '--uploads <n>',
      description: 'piece uploads at once; more requests are told to come back',
      default: '8',
    },
    {
      flags: '--recent-mb <MiB>',
      description:
        'memory for the pieces verified last, which peers and local reads are served from without reading the disk (default: 32 pieces of the largest-piece model, 16-256 MiB; 0: none)',
    },
    {
      flags: '--destination-root <dir>',
      description:
        "a pull's destination under DIR is written by the agent directly (no copy); repeatable. Any process that reaches the local API can then have this agent write a model there, so name only model directories",
      repeat: true,
    },
    {
      flags: '--no-direct-io',
      description:
        'write and read pieces through the page cache (default: O_DIRECT where the file system allows it, which saves a copy of every byte but leaves the files out of the page cache)',
    },
    {
      flags: '--tcp-congestion <name>',
      description:
        "TCP congestion control for what peers are sent: auto (the system's, but cubic where that is bbr, whose RTT probe stalls a chain for ~200 ms every 10 s), system, or an algorithm this kernel offers",
      default: 'auto',
    },
    // Fault injection for tests and demos: this agent serves wrong bytes on purpose.
    { flags: '--inject-corrupt-uploads', description: '', hidden: true },
    {
      flags: '--role <role>',
      description: 'swarm: fetch models for this host; seed: also hold pieces for the seed tier',
      choices: ['swarm', 'seed'],
      default: 'swarm',
    },
    // Fault injection for tests: as a seed node, store every piece with one byte flipped.
    { flags: '--inject-seed-corrupt-stores', description: '', hidden: true },
    ...serverLimitOptions(30),
    ...ORIGIN_RETRY_OPTIONS,
    { flags: '--json', description: 'events as JSON lines on stdout' },
  ],
  async run(_args, flags, io) {
    const { agentCommand } = await import('../commands/agent.js');
    return agentCommand(flags as unknown as AgentFlags, io);
  },
};

export const registerAgent = registerSpec(AGENT_COMMAND);
