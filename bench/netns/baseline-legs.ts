/**
 * The two reference legs of bench:fanout, run on the same testbed as weightcast's:
 *
 * - bittorrent: what people already run. A private torrent of the model (mktorrent, piece length
 *   nearest ours), opentracker and an aria2c seeder on the origin's host, and at the clock's start
 *   an aria2c on every host that downloads into its own directory and goes on seeding until every
 *   host is done. Peers come from the tracker only (no DHT, local discovery or peer exchange).
 * - chain: the testbed's ceiling. A fixed pipelined relay origin -> host1 -> ... -> hostN of socat,
 *   tee and tar: each host writes the stream to disk and forwards every byte as it arrives; no
 *   verification, no scheduling.
 * - node-chain: the same relay with a minimal Node.js process on every host (bench/node-relay.ts):
 *   each read lands in a reused buffer, is hashed into its piece's SHA-256, written and forwarded.
 *   What Node itself costs to move, verify and store the bytes at the links' pace, with no design
 *   of ours around it: the floor under the agents' CPU.
 *
 * All need the netns testbed (on loopback nothing would cap them); the first two Debian's tools, and
 * a leg whose tools are missing is skipped with the packages to install.
 */

import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  aria2cArgv,
  BASELINE_INSTALL_HINT,
  BITTORRENT_COMPLETE_LINE,
  BITTORRENT_TOOLS,
  CHAIN_PORT,
  CHAIN_RECEIVED_LINE,
  CHAIN_TOOLS,
  chainHostArgv,
  chainOriginArgv,
  completionHookScript,
  mktorrentArgv,
  NODE_CHAIN_PORT,
  NODE_CHAIN_RECEIVED_LINE,
  nodeChainHostArgv,
  nodeChainOriginArgv,
  storeRingHostArgv,
  storeRingOriginArgv,
  opentrackerArgv,
  parseInfoHash,
  parseScrapeSeeds,
  scrapeArgv,
  TRACKER_PORT,
} from './commands.js';
import {
  allReady,
  failedRuns,
  hostsPrint,
  LEG_TIMEOUT_FACTOR,
  LEG_TIMEOUT_MIN_MS,
  LegMeter,
  log,
  missingTools,
  release,
  runIn,
  spawnLogged,
  START_TIMEOUT_MS,
  startService,
  stopAll,
  verifyAndMeasure,
  waitListening,
  waitUntil,
  type HostRun,
  type LegContext,
} from './leg-runtime.js';
import { lowerBoundSeconds, type LegMeasurement } from './report.js';

/** mktorrent hashes the whole model (before the clock): allow it a while on a slow disk. */
const MKTORRENT_TIMEOUT_MS = 300_000;
/** aria2c --check-integrity hashes the whole model before the seeder serves. */
const SEEDER_READY_TIMEOUT_MS = 300_000;

/** Why a baseline leg cannot run here, or undefined. */
function baselineProblem(context: LegContext, tools: readonly string[]): string | undefined {
  if (context.hostSet.mode !== 'netns') return 'needs the netns testbed (root and ip netns)';
  const missing = missingTools(tools);
  if (missing.length > 0) return `${missing.join(', ')} not installed (${BASELINE_INSTALL_HINT})`;
  return undefined;
}

function skipped(leg: string, why: string): LegMeasurement {
  log(`${leg}: not run: ${why}`);
  return { leg, hostSeconds: [], hostsVerified: 0, originBytes: undefined, skipped: why };
}

function legTimeoutMs(context: LegContext): number {
  return Math.max(LEG_TIMEOUT_MIN_MS, LEG_TIMEOUT_FACTOR * 2 * lowerBoundSeconds(context.setting) * 1000);
}

export async function bittorrentLeg(context: LegContext): Promise<LegMeasurement> {
  const leg = 'bittorrent';
  const problem = baselineProblem(context, BITTORRENT_TOOLS);
  if (problem !== undefined) return skipped(leg, problem);
  const { hostSet, model, work } = context;
  const dir = join(work, leg);
  const dirs = hostSet.hosts.map((host) => join(dir, host.label));
  const meter = await LegMeter.open(context, leg);
  const services: ChildProcess[] = [];
  let runs: HostRun[] = [];
  try {
    const torrent = await makeTorrent(context, dir);
    await startService(
      context,
      meter,
      services,
      hostSet.origin.ns,
      opentrackerArgv({ address: hostSet.origin.address, dir, whitelistName: 'whitelist' }),
      'opentracker',
      { role: 'tracker' },
    );
    await waitListening(hostSet, hostSet.origin, TRACKER_PORT, 'opentracker');
    await startService(
      context,
      meter,
      services,
      hostSet.origin.ns,
      aria2cArgv({ role: 'seeder', torrentPath: torrent.path, dir: model.originRoot, benchPid: process.pid }),
      'aria2c-seeder',
      { role: 'seeder', mergeStderr: true },
    );
    log(`${leg}: the seeder checks the origin's copy, then announces`);
    await waitUntil(
      async () =>
        (parseScrapeSeeds(
          await runIn(hostSet, hostSet.origin.ns, scrapeArgv(hostSet.origin.address, torrent.infoHash)),
        ) ?? 0) >= 1,
      SEEDER_READY_TIMEOUT_MS,
      'the seeder announced to the tracker',
    );
    const hook = join(dir, 'complete-hook.sh');
    await writeFile(hook, completionHookScript());
    await chmod(hook, 0o755);
    await Promise.all(dirs.map((hostDir) => mkdir(hostDir, { recursive: true })));
    const leechers = hostSet.hosts.map((host, index) =>
      spawnLogged(
        context,
        host.ns,
        aria2cArgv({
          role: 'leecher',
          torrentPath: torrent.path,
          dir: dirs[index] ?? '',
          benchPid: process.pid,
          completionHook: hook,
        }),
        `aria2c-${host.label}`,
        { gate: true, mergeStderr: true },
      ),
    );
    services.push(...leechers);
    await allReady(
      leechers,
      hostSet.hosts.map((host) => `aria2c on ${host.label}`),
    );
    await meter.adopt(leechers, 'leechers');
    log(`${leg}: ${hostSet.hosts.length} aria2c at once`);
    const started = await meter.start();
    for (const leecher of leechers) release(leecher);
    const deadline = started + legTimeoutMs(context);
    const labels = hostSet.hosts.map((host) => host.label);
    runs = await hostsPrint(leechers, new RegExp(`^${BITTORRENT_COMPLETE_LINE} `), started, deadline, labels);
    // Every leecher seeded until now; the clocks stop before they are stopped.
    await meter.stop();
  } catch (error) {
    runs = failedRuns(leg, hostSet.hosts.length, error);
  } finally {
    await stopAll(services);
    await meter.close();
  }
  return verifyAndMeasure(
    context,
    meter,
    leg,
    runs,
    dirs.map((hostDir) => join(hostDir, 'model')),
    dir,
  );
}

/** The torrent file and its info hash, which Debian's opentracker must find in its whitelist. */
async function makeTorrent(context: LegContext, dir: string): Promise<{ path: string; infoHash: string }> {
  const { hostSet, model } = context;
  await mkdir(dir, { recursive: true });
  // opentracker chroots here and drops to an unprivileged user, which must read the whitelist.
  await chmod(dir, 0o755);
  const path = join(dir, 'model.torrent');
  const argv = mktorrentArgv({
    modelDir: model.dir,
    name: 'model',
    trackerAddress: hostSet.origin.address,
    pieceBytes: model.pieceBytes,
    torrentPath: path,
  });
  log(`bittorrent: ${argv.join(' ')}`);
  checkRun(argv, MKTORRENT_TIMEOUT_MS);
  const shown = checkRun(['aria2c', '--show-files', path], START_TIMEOUT_MS);
  const infoHash = parseInfoHash(shown);
  if (infoHash === undefined)
    throw new Error(`no info hash in aria2c --show-files output: ${shown.slice(0, 300)}`);
  await writeFile(join(dir, 'whitelist'), `${infoHash}\n`, { mode: 0o644 });
  return { path, infoHash };
}

function checkRun(argv: readonly string[], timeoutMs: number): string {
  const [command, ...args] = argv;
  const result = spawnSync(command ?? '', args, { encoding: 'utf8', timeout: timeoutMs });
  if (result.status !== 0) {
    const said = (result.stderr || result.stdout || result.error?.message || '').trim().slice(-300);
    throw new Error(`${argv.join(' ')}: exit ${result.status ?? result.signal}: ${said}`);
  }
  return result.stdout;
}

/** What a relay chain leg starts before the clock: the origin's sender (held until released) and each host's relay. */
interface ChainProcesses {
  sender: ChildProcess;
  /** In host order. */
  relays: ChildProcess[];
}

/**
 * A relay chain leg (chain, node-chain): `start` starts the sender and every host's relay (pushing
 * each on `children` at once, so they are stopped whatever happens) with `dirs` made; the clock starts
 * at the sender's release and each host is done when its relay prints `receivedLine`.
 */
async function relayChainLeg(
  context: LegContext,
  leg: string,
  receivedLine: string,
  start: (meter: LegMeter, children: ChildProcess[], dirs: string[], dir: string) => Promise<ChainProcesses>,
): Promise<LegMeasurement> {
  const { hostSet, work } = context;
  const dir = join(work, leg);
  const dirs = hostSet.hosts.map((host) => join(dir, host.label));
  const labels = hostSet.hosts.map((host) => host.label);
  const meter = await LegMeter.open(context, leg);
  const children: ChildProcess[] = [];
  let runs: HostRun[] = [];
  try {
    await Promise.all(dirs.map((hostDir) => mkdir(hostDir, { recursive: true })));
    const { sender, relays } = await start(meter, children, dirs, dir);
    log(`${leg}: origin -> ${labels.join(' -> ')}`);
    const started = await meter.start();
    release(sender);
    const deadline = started + legTimeoutMs(context);
    runs = await hostsPrint(relays, new RegExp(`^${receivedLine}$`), started, deadline, labels);
    await meter.stop();
  } catch (error) {
    runs = failedRuns(leg, hostSet.hosts.length, error);
  } finally {
    await stopAll(children);
    await meter.close();
  }
  return verifyAndMeasure(context, meter, leg, runs, dirs, dir);
}

export async function chainLeg(context: LegContext): Promise<LegMeasurement> {
  const leg = 'chain';
  const problem = baselineProblem(context, CHAIN_TOOLS);
  if (problem !== undefined) return skipped(leg, problem);
  const { hostSet, model } = context;
  return relayChainLeg(context, leg, CHAIN_RECEIVED_LINE, async (meter, children, dirs, dir) => {
    // From the last host back to the first, each listening before its predecessor connects to it.
    const relays: ChildProcess[] = [];
    for (let index = hostSet.hosts.length - 1; index >= 0; index--) {
      const host = hostSet.hosts[index];
      if (host === undefined) continue;
      const argv = chainHostArgv({
        listenAddress: host.address,
        dir: dirs[index] ?? '',
        fifo: join(dir, `${host.label}.fifo`),
        nextAddress: hostSet.hosts[index + 1]?.address,
      });
      const child = await startService(context, meter, children, host.ns, argv, `chain-${host.label}`, {
        role: 'relays',
      });
      relays.unshift(child);
      await waitListening(hostSet, host, CHAIN_PORT, `chain on ${host.label}`);
    }
    const firstAddress = hostSet.hosts[0]?.address ?? '';
    const sender = spawnLogged(
      context,
      hostSet.origin.ns,
      chainOriginArgv({ modelDir: model.dir, firstAddress }),
      'chain-origin',
      { gate: true },
    );
    children.push(sender);
    await allReady([sender], ['chain origin']);
    await meter.adopt([sender], 'sender');
    return { sender, relays };
  });
}

/**
 * Starts a Node.js relay leg's origin program on the origin's host, in the leg's cgroup as its
 * sender, and waits until it listens on NODE_CHAIN_PORT.
 */
async function startRelayOrigin(
  context: LegContext,
  meter: LegMeter,
  children: ChildProcess[],
  leg: string,
  argv: string[],
): Promise<ChildProcess> {
  const { hostSet } = context;
  const sender = spawnLogged(context, hostSet.origin.ns, argv, `${leg}-origin`);
  children.push(sender);
  await meter.adopt([sender], 'sender');
  await waitListening(hostSet, hostSet.origin, NODE_CHAIN_PORT, `${leg} origin`);
  return sender;
}

/** The node-chain's program, beside this directory in the build (dist/bench/node-relay.js). */
const NODE_RELAY = fileURLToPath(new URL('../node-relay.js', import.meta.url));

/**
 * The node-chain, or with `store` the store-chain: the same relays keeping each piece as an agent
 * does (bench/node-relay.ts --store), so the two rows differ by what the piece store costs.
 */
export async function nodeChainLeg(context: LegContext, store = false): Promise<LegMeasurement> {
  const leg = store ? 'store-chain' : 'node-chain';
  if (context.hostSet.mode !== 'netns') return skipped(leg, 'needs the netns testbed (root and ip netns)');
  const { hostSet, model } = context;
  return relayChainLeg(context, leg, NODE_CHAIN_RECEIVED_LINE, async (meter, children, dirs) => {
    // The origin listens first; each host listens for its successor before the next one starts, and
    // connects to its predecessor once its successor is there, so the chain forms from the last host.
    const sender = await startRelayOrigin(
      context,
      meter,
      children,
      leg,
      nodeChainOriginArgv({
        node: context.node,
        relay: NODE_RELAY,
        modelDir: model.dir,
        manifestPath: model.manifestPath,
        address: hostSet.origin.address,
      }),
    );
    const relays: ChildProcess[] = [];
    for (const [index, host] of hostSet.hosts.entries()) {
      const upstream = index === 0 ? hostSet.origin : hostSet.hosts[index - 1];
      const last = index === hostSet.hosts.length - 1;
      const argv = nodeChainHostArgv({
        node: context.node,
        relay: NODE_RELAY,
        dir: dirs[index] ?? '',
        manifestPath: model.manifestPath,
        upstreamAddress: upstream?.address ?? '',
        listenAddress: last ? undefined : host.address,
        store,
      });
      relays.push(
        await startService(context, meter, children, host.ns, argv, `${leg}-${host.label}`, {
          role: 'relays',
        }),
      );
      if (!last) await waitListening(hostSet, host, NODE_CHAIN_PORT, `${leg} on ${host.label}`);
    }
    // The origin says ready once host1 is connected, which it is only once the whole chain is.
    await allReady([sender], [`${leg} origin`]);
    return { sender, relays };
  });
}

/** The store-ring's program (dist/bench/ring-relay.js). */
const RING_RELAY = fileURLToPath(new URL('../ring-relay.js', import.meta.url));

/**
 * The store-ring: the ring all-gather proposed for healthy swarms, from the piece store alone
 * (bench/ring-relay.ts): host i takes the pieces p with p mod N = i from the origin and the rest from
 * host i-1, keeps each as an agent does, then pushes it on to host i+1.
 */
export async function storeRingLeg(context: LegContext): Promise<LegMeasurement> {
  const leg = 'store-ring';
  if (context.hostSet.mode !== 'netns') return skipped(leg, 'needs the netns testbed (root and ip netns)');
  const { hostSet, model } = context;
  const hosts = hostSet.hosts.length;
  return relayChainLeg(context, leg, NODE_CHAIN_RECEIVED_LINE, async (meter, children, dirs) => {
    const sender = await startRelayOrigin(
      context,
      meter,
      children,
      leg,
      storeRingOriginArgv({
        node: context.node,
        relay: RING_RELAY,
        modelDir: model.dir,
        manifestPath: model.manifestPath,
        address: hostSet.origin.address,
        hosts,
      }),
    );
    const relays: ChildProcess[] = [];
    for (const [index, host] of hostSet.hosts.entries()) {
      const predecessor = hostSet.hosts[(index + hosts - 1) % hosts];
      const argv = storeRingHostArgv({
        node: context.node,
        relay: RING_RELAY,
        dir: dirs[index] ?? '',
        manifestPath: model.manifestPath,
        hosts,
        index,
        origin: `${hostSet.origin.address}:${NODE_CHAIN_PORT}`,
        upstream: `${predecessor?.address ?? ''}:${NODE_CHAIN_PORT}`,
        listen: `${host.address}:${NODE_CHAIN_PORT}`,
      });
      relays.push(
        await startService(context, meter, children, host.ns, argv, `${leg}-${host.label}`, {
          role: 'relays',
        }),
      );
    }
    // The origin says ready once every host is connected, which each is only once its ring links are.
    await allReady([sender], [`${leg} origin`]);
    return { sender, relays };
  });
}
