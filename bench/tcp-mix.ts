/**
 * `node dist/bench/tcp-mix.js [--hosts N] [--mbps B] [--loops K] [--seconds S] [--range-mb R]
 * [--sockets C]`: how full TCP keeps
 * the testbed's capped links under the swarm's kind of traffic, with no weightcast code in the path.
 * Every host serves R MiB ranges (default 1) of an in-memory buffer over HTTP and pulls them from the
 * other hosts with K loops (keep-alive connections, at most C per peer, default K; one request after
 * another per loop), three ways:
 * `fixed` (loop i always asks the i-th other host by address: balanced only with K = N - 1),
 * `ring` (loop i of host h always asks host h + 1 + i, wrapping around: every host has K flows each
 * way, the pattern of the swarm's ring pairings) and `random` (each request picks a peer at random,
 * as a per-piece parent choice does). Prints each mode's download rate per host against the link's
 * payload ceiling. Needs root and `ip netns`.
 *
 * Worker mode (internal): `--worker ADDRESS --peers A,B --mode M --loops K --start-at MS --seconds S
 * --range-mb R [--sockets C]`.
 */

import { randomBytes, randomInt } from 'node:crypto';
import { Agent, createServer, request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { textTable } from '../src/util/text-table.js';
import { stopChild, waitForExit } from './netns/children.js';
import { MTU_DEFAULT, tcpPayloadShare } from './netns/plan.js';
import { createTestbed, netnsProblem } from './netns/testbed.js';

const PORT = 8090;
const BUFFER_RANGES = 16;
/** tc counts headers: TCP payload of a full-size frame at MTU 1500 is 1448 of 1514 bytes. */
const PAYLOAD_SHARE = tcpPayloadShare(MTU_DEFAULT);
const START_SLACK_MS = 2000;
const REQUEST_TIMEOUT_MS = 10_000;
const SELF = fileURLToPath(import.meta.url);
type Mode = 'fixed' | 'ring' | 'random';

async function worker(values: Record<string, string | boolean | undefined>): Promise<void> {
  const address = String(values['worker']);
  const peers = String(values['peers']).split(',');
  const mode = values['mode'] as Mode;
  const loops = Number(values['loops']);
  const startAt = Number(values['start-at']);
  const endAt = startAt + Number(values['seconds']) * 1000;
  const RANGE_BYTES = Number(values['range-mb'] ?? 1) * 1024 * 1024;
  const buffer = randomBytes(RANGE_BYTES * BUFFER_RANGES);
  const server = createServer((req, res) => {
    const match = /bytes=(\d+)-(\d+)/.exec(req.headers.range ?? '');
    const first = Number(match?.[1] ?? 0);
    const last = Math.min(buffer.length - 1, Number(match?.[2] ?? buffer.length - 1));
    res.writeHead(206, { 'content-length': last - first + 1 });
    res.end(buffer.subarray(first, last + 1));
  });
  await new Promise<void>((resolve) => server.listen(PORT, address, resolve));
  const sockets = Number(values['sockets'] ?? loops);
  const agents = new Map(peers.map((peer) => [peer, new Agent({ keepAlive: true, maxSockets: sockets })]));
  let bytes = 0;
  let failures = 0;
  const get = (peer: string): Promise<void> =>
    new Promise((resolve) => {
      const offset = randomInt(BUFFER_RANGES) * RANGE_BYTES;
      const req = request(
        {
          host: peer,
          port: PORT,
          agent: agents.get(peer),
          timeout: REQUEST_TIMEOUT_MS,
          headers: { range: `bytes=${offset}-${offset + RANGE_BYTES - 1}` },
        },
        (res) => {
          res.on('data', (chunk: Buffer) => {
            if (Date.now() < endAt) bytes += chunk.length;
          });
          res.on('end', resolve);
          res.on('error', () => resolve());
        },
      );
      req.on('timeout', () => req.destroy());
      req.on('error', () => {
        failures++;
        resolve();
      });
      req.end();
    });
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - Date.now())));
  const loop = async (index: number): Promise<void> => {
    while (Date.now() < endAt) {
      // The controller lists a ring host's peers from the next one by address on.
      const peer = mode === 'random' ? peers[randomInt(peers.length)]! : peers[index % peers.length]!;
      await get(peer);
    }
  };
  await Promise.all(Array.from({ length: loops }, (_, index) => loop(index)));
  // Keep serving while the slowest peers finish their last requests.
  await new Promise((resolve) => setTimeout(resolve, START_SLACK_MS));
  for (const agent of agents.values()) agent.destroy();
  server.close();
  process.stdout.write(JSON.stringify({ bytes, failures }) + '\n');
}

const OPTIONS = {
  hosts: { type: 'string', default: '4' },
  mbps: { type: 'string', default: '200' },
  loops: { type: 'string', default: '4' },
  seconds: { type: 'string', default: '8' },
  worker: { type: 'string' },
  peers: { type: 'string' },
  mode: { type: 'string' },
  'start-at': { type: 'string' },
  sockets: { type: 'string' },
  'range-mb': { type: 'string', default: '1' },
  help: { type: 'boolean' },
} as const;

const USAGE =
  'usage: npm run bench:tcp -- [--hosts N (2-16)] [--mbps B] [--loops K] [--seconds S] [--range-mb R] [--sockets C]';

class UsageError extends Error {}

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({ options: OPTIONS });
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const { values } = parsed;
  if (values.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  if (values.worker !== undefined) return worker(values);
  const hosts = Number(values.hosts);
  const mbps = Number(values.mbps);
  const loops = Number(values.loops);
  const seconds = Number(values.seconds);
  if (![hosts, mbps, loops, seconds].every((n) => Number.isInteger(n) && n > 0) || hosts < 2 || hosts > 16) {
    throw new UsageError('--hosts (2-16), --mbps, --loops and --seconds must be positive integers');
  }
  const problem = await netnsProblem();
  if (problem !== undefined) {
    process.stdout.write(`tcp-mix needs network namespaces: ${problem}\n`);
    return;
  }
  const testbed = await createTestbed({ hosts, hostMbps: mbps, originMbps: mbps });
  const ceiling = (mbps * 1e6 * PAYLOAD_SHARE) / 8 / 1e6;
  const rows: string[][] = [];
  try {
    for (const mode of ['fixed', 'ring', 'random'] as const) {
      const startAt = Date.now() + START_SLACK_MS;
      const children = testbed.hosts.map((host, index) => {
        const all = testbed.hosts.map((other) => other.address);
        const peers =
          mode === 'ring'
            ? [...all.slice(index + 1), ...all.slice(0, index)]
            : all.filter((address) => address !== host.address);
        const argv = [
          process.execPath,
          SELF,
          '--worker',
          host.address,
          '--peers',
          peers.join(','),
          '--mode',
          mode,
        ];
        argv.push('--loops', String(loops), '--start-at', String(startAt), '--seconds', String(seconds));
        if (values.sockets !== undefined) argv.push('--sockets', values.sockets);
        argv.push('--range-mb', values['range-mb']);
        const child = testbed.spawnIn(host.ns, argv);
        let out = '';
        child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
        return { child, output: () => out };
      });
      const timeoutMs = START_SLACK_MS * 3 + seconds * 1000 + REQUEST_TIMEOUT_MS;
      await Promise.all(
        children.map(async ({ child }) => {
          if ((await waitForExit(child, timeoutMs)) === undefined) await stopChild(child);
        }),
      );
      const rates = children.map(({ output }) => {
        const parsed = JSON.parse(output().trim() || '{"bytes":0}') as { bytes: number };
        return parsed.bytes / seconds / 1e6;
      });
      const average = rates.reduce((a, b) => a + b, 0) / rates.length;
      rows.push([
        mode,
        String(loops),
        Math.min(...rates).toFixed(1),
        average.toFixed(1),
        ceiling.toFixed(1),
        (average / ceiling).toFixed(2),
      ]);
    }
  } finally {
    await testbed.close();
  }
  process.stdout.write(
    `${hosts} hosts at ${mbps} Mbit/s each way (tc tbf), ${loops} loops per host pulling ${values['range-mb']} MiB ranges for ${seconds} s\n\n`,
  );
  const header = [
    'peers',
    'loops/host',
    'host MB/s min',
    'host MB/s avg',
    'payload ceiling',
    'avg / ceiling',
  ];
  process.stdout.write(textTable(header, rows, [1, 2, 3, 4, 5]).join('\n') + '\n');
}

main().catch((error: unknown) => {
  if (error instanceof UsageError) {
    process.stderr.write(`bench:tcp: ${error.message}\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exitCode = 1;
});
