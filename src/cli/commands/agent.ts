/** `weightcast agent --scheduler URL --cache DIR`: runs a swarm agent until Ctrl-C. */

import { Option, type Command } from 'commander';
import { WeightcastError } from '../../errors.js';
import { Agent, type AgentEvent } from '../../swarm/agent/agent.js';
import { parseMbps, parsePositiveInt } from '../../util/units.js';
import { reportError, serveUntilInterrupted, type CliIo } from '../io.js';
import type { RegisterCommand } from './index.js';
import { serviceUrlFlag } from './shared.js';
import { SeedNode } from '../../seed/node/seed-node.js';
import { join } from 'node:path';

interface AgentFlags {
  scheduler: string;
  cache: string;
  port: string;
  host: string;
  advertise?: string;
  name?: string;
  zone?: string;
  rack?: string;
  uploadMbps?: string;
  downloadMbps?: string;
  uploads: string;
  injectCorruptUploads?: boolean;
  role: string;
  injectSeedCorruptStores?: boolean;
  json?: boolean;
}

export const registerAgent: RegisterCommand = (program: Command, io: CliIo, setExitCode) => {
  program
    .command('agent')
    .description('Run a swarm agent: a verified piece cache that fetches from peers and serves them')
    .requiredOption('--scheduler <url>', 'the scheduler, e.g. http://10.0.0.1:7000')
    .requiredOption('--cache <dir>', 'where verified pieces are kept (a restart resumes from here)')
    .option('--port <port>', 'port for peers and local pulls (0 = any)', '7100')
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--advertise <url>', 'URL peers should use to reach this agent (default: the listening address)')
    .option('--name <name>', 'name in the swarm (default: kept in the cache)')
    .option('--zone <zone>', 'locality label: peers in the same zone are preferred')
    .option('--rack <rack>', 'locality label: peers in the same rack are preferred most')
    .option('--upload-mbps <mbit/s>', 'cap on what this agent sends to peers')
    .option('--download-mbps <mbit/s>', 'cap on what this agent receives')
    .option('--uploads <n>', 'piece uploads at once; more requests are told to come back', '8')
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
    .addOption(new Option('--inject-seed-corrupt-stores').hideHelp())
    .option('--json', 'events as JSON lines on stdout')
    .action(async (flags: AgentFlags) => setExitCode(await agentCommand(flags, io)));
};

async function agentCommand(flags: AgentFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  try {
    const port = Number(flags.port);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new WeightcastError('USAGE', `--port must be 0-65535, got ${flags.port}`);
    }
    serviceUrlFlag(flags.scheduler, '--scheduler', 'http://10.0.0.1:7000');
    if (flags.advertise !== undefined) serviceUrlFlag(flags.advertise, '--advertise', 'http://10.0.0.2:7001');
    const upload = parseMbps(flags.uploadMbps, '--upload-mbps');
    const download = parseMbps(flags.downloadMbps, '--download-mbps');
    const seed =
      flags.role === 'seed'
        ? await SeedNode.open({
            dir: join(flags.cache, 'seed'),
            ...(upload === undefined ? {} : { uploadBytesPerSecond: upload }),
            ...(flags.injectSeedCorruptStores === true ? { corruptStores: true } : {}),
          })
        : undefined;
    const agent = await Agent.start({
      ...(seed === undefined ? {} : { seedRoutes: seed.handle }),
      schedulerUrl: flags.scheduler,
      cacheDir: flags.cache,
      host: flags.host,
      port,
      uploadsMax: parsePositiveInt(flags.uploads, '--uploads'),
      ...(flags.advertise === undefined ? {} : { advertiseUrl: flags.advertise }),
      ...(flags.name === undefined ? {} : { name: flags.name }),
      ...(flags.zone === undefined ? {} : { zone: flags.zone }),
      ...(flags.rack === undefined ? {} : { rack: flags.rack }),
      ...(upload === undefined ? {} : { uploadBytesPerSecond: upload }),
      ...(download === undefined ? {} : { downloadBytesPerSecond: download }),
      ...(flags.injectCorruptUploads === true ? { corruptUploads: true } : {}),
      // For comparisons: WEIGHTCAST_PEER_WIRE=0 reads peers over HTTP ranges, as before the peer wire.
      ...(process.env['WEIGHTCAST_PEER_WIRE'] === '0' ? { peerWire: false } : {}),
      onEvent: (event) => printEvent(io, event, json),
    });
    await seed?.register(flags.scheduler, agent.name, agent.url, io.signal).catch(async (error: unknown) => {
      await agent.close();
      throw error;
    });
    await serveUntilInterrupted(io, json, 'agent', { url: agent.url, name: agent.name });
    await agent.close();
    return 0;
  } catch (error) {
    return reportError(io, error, json);
  }
}

function printEvent(io: CliIo, event: AgentEvent, json: boolean): void {
  // Diagnostics: WEIGHTCAST_TRACE_PIECES=1 logs every piece with a wall-clock time, to study a run's timing.
  if (process.env['WEIGHTCAST_TRACE_PIECES'] === '1' && event.type === 'piece') {
    io.stderr(JSON.stringify({ at: performance.timeOrigin + performance.now(), ...event }) + '\n');
  }
  if (json) {
    if (event.type !== 'piece') io.stdout(JSON.stringify({ event: event.type, ...event }) + '\n');
    return;
  }
  const model = event.model.slice(0, 12);
  switch (event.type) {
    case 'joined':
      io.stdout(`model ${model}: joined, ${event.held} of ${event.pieces} pieces already verified here\n`);
      break;
    case 'registered':
      io.stdout(`model ${model}: registered with the scheduler as host ${event.host}\n`);
      break;
    case 'scheduler-lost':
      io.stdout(
        `model ${model}: scheduler lost (${event.reason}); carrying on with known peers and the origin\n`,
      );
      break;
    case 'piece':
      if (event.outcome === 'corrupt')
        io.stdout(
          `model ${model}: piece ${event.piece} from a ${event.from} failed verification; refetching\n`,
        );
      break;
    case 'complete':
      io.stdout(`model ${model}: complete; seeding\n`);
      break;
    case 'resume-failed':
      io.stdout(`model ${model}: could not resume from the cache: ${event.reason}\n`);
      break;
  }
}
