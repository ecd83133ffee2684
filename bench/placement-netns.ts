/**
 * Part (a) of `npm run bench:placement`: a single client pulls a model from the seed tier on a netns
 * testbed, first while the model's pieces sit on 2 of the K seed nodes, then after
 * `weightcast distribute --mode round-robin --apply` has spread them over all K.
 *
 * Testbed (bench/netns): the testbed's `origin` endpoint is the client, on a link of
 * `clientMbps` (default 2 x K x node rate, so the seed nodes are the bottleneck); hosts 1..K are the
 * seed nodes (`agent --role seed`) on links of `nodeMbps` each; host K+1 runs the scheduler with
 * `--catalog` and, later, the `distribute` command. Every link is capped both ways by tc.
 *
 * How the model ends up on 2 nodes: only seed nodes 1 and 2 are started when `weightcast put` runs
 * (from the client's namespace, round-robin over the nodes registered then); nodes 3..K start after
 * it. That is the story of the seed: the tier grew after the model was written, and nothing moved it.
 *
 * Each pull is timed from the spawn of `weightcast pull --seeds` to its exit (process start
 * included), with every node namespace's eth0 TX counter read before and after, and the copy is
 * verified against the manifest afterwards. The bound is S / min(client link, n x node link), n the
 * nodes holding the pieces, at the raw link rate (tbf counts Ethernet, IP and TCP headers, so
 * about 1448/1514 of it is payload: a perfect run shows T / bound near 1.05).
 */

import { type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildManifest } from '../src/manifest/build.js';
import { manifestDigest, totalBytes, writeManifest, type Manifest } from '../src/manifest/manifest.js';
import { verifyDirectory } from '../src/manifest/verify.js';
import { LocalOrigin } from '../src/origin/local.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { formatBytes } from '../src/util/units.js';
import { firstMatch, saveOutput, stopChild, tailOf, waitForExit } from './netns/children.js';
import { MTU_DEFAULT, tcpPayloadShare, type Endpoint } from './netns/plan.js';
import { renderTable } from './netns/report.js';
import { createTestbed, type Testbed } from './netns/testbed.js';
import { ensureClusterTokens } from './netns/cluster-tokens.js';

const MiB = 1024 * 1024;
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'bin', 'weightcast.js');
const NODE = process.execPath;

export const NODES_MIN = 2;
export const NODES_MAX = 8;
/** Nodes holding the model before the re-layout. */
export const NODES_BEFORE = 2;
export const GOAL_RATIO = 1.1;
/** The testbed's links run MTU 1500: 1448 payload bytes per 1514 bytes tbf counts. */
export const TCP_PAYLOAD_SHARE = tcpPayloadShare(MTU_DEFAULT);

/**
 * The pull takes pieces in order and each lane waits for its piece, so lanes drift between nodes: with
 * 2 lanes per node a node is sometimes left with none in flight and its link idles (measured at
 * 256 MiB, K = 6: T pull / bound 1.134 with 2 per node, 1.108 and 1.102 with 4, whose wire time from
 * 1 % to 99 % of S was 1.048 x its share of the bound, i.e. the links were full). The pull's
 * default of 4 lanes in all would keep at most 4 of the K nodes busy.
 */
export const PULL_LANES_PER_NODE = 4;

const SCHEDULER_PORT = 7000;
const NODE_PORT = 7001;
const START_TIMEOUT_MS = 30_000;
/** Each timed step gets at least this long, and at least `STEP_TIMEOUT_FACTOR` x its fluid time. */
const STEP_TIMEOUT_MIN_MS = 60_000;
const STEP_TIMEOUT_FACTOR = 4;
/** The distribute keeps old copies this long after each commit (no reader is running during it). */
const GRACE_MS = 1000;

export interface NetnsOptions {
  nodes: number;
  nodeMbps: number;
  clientMbps: number;
  sizeMb: number;
  pieceMb: number;
  /** Pieces the client pulls at once (`pull --concurrency`). */
  concurrency: number;
  /** Where the run's temporary directory is made. */
  work: string;
  keep: boolean;
  log: (text: string) => void;
}

export function defaultNetnsOptions(nodes: number): Omit<NetnsOptions, 'log'> {
  const nodeMbps = 50;
  return {
    nodes,
    nodeMbps,
    clientMbps: 2 * nodes * nodeMbps,
    // A pull pays about 0.4 s of its own start (hash threads, plan, first requests) and finish (fsync,
    // rename); at 256 MiB that was 5 % of the after-layout pull, at 384 MiB it is about 3.5 %.
    sizeMb: 384,
    pieceMb: 1,
    concurrency: PULL_LANES_PER_NODE * nodes,
    work: tmpdir(),
    keep: false,
  };
}

export interface PullLeg {
  label: string;
  /** Nodes holding the model's pieces during this pull. */
  layoutNodes: number;
  /** Spawn to exit; undefined when the pull failed or timed out. */
  seconds: number | undefined;
  /** The pull's own timing (after it opened the seed source), from its JSON summary. */
  transferSeconds: number | undefined;
  /** From the spawn: when the client's link had carried the first and the last 1 % of S. */
  wire: { firstSeconds: number; lastSeconds: number } | undefined;
  boundSeconds: number;
  verified: boolean;
  /** eth0 TX bytes of each seed node's namespace during the pull, in node order. */
  bytesByNode: number[];
  problem?: string;
}

export interface DistributeStep {
  seconds: number | undefined;
  moves: number;
  bytesCopied: number;
  committed: number;
  problem?: string;
}

export interface NetnsResult {
  options: Omit<NetnsOptions, 'log'>;
  totalBytes: number;
  pieces: number;
  nodeLabels: string[];
  before: PullLeg;
  distribute: DistributeStep;
  after: PullLeg;
}

/** S / min(client link, n x node link), in seconds, at the raw link rates. */
export function pullBoundSeconds(
  bytes: number,
  clientMbps: number,
  holdingNodes: number,
  nodeMbps: number,
): number {
  return (bytes * 8) / (Math.min(clientMbps, holdingNodes * nodeMbps) * 1e6);
}

/**
 * The goal: after the round-robin apply every node served, and the pull is within 1.1 x the bound,
 * on the pull's own clock (from the seed source opened to the last file verified and renamed). The
 * spawn-to-exit time adds the CLI's start (about 1 s of Node start and module loading on a busy
 * 2-core machine), which no network layout can remove; the table shows both.
 */
export function goalMet(result: NetnsResult): boolean {
  const { after } = result;
  return (
    after.transferSeconds !== undefined &&
    after.verified &&
    after.bytesByNode.length === result.options.nodes &&
    everyNodeServed(after, result.totalBytes) &&
    after.transferSeconds / after.boundSeconds <= GOAL_RATIO
  );
}

/**
 * A node "serves" when it sent at least a quarter of its fair share (S / K): TX counters also see
 * ARP, TCP acknowledgements and catalog traffic, which are far smaller than that.
 */
export function everyNodeServed(leg: PullLeg, bytes: number): boolean {
  const floor = bytes / leg.bytesByNode.length / 4;
  return leg.bytesByNode.every((sent) => sent >= floor);
}

export async function runPlacementNetns(options: NetnsOptions): Promise<NetnsResult> {
  const { log } = options;
  ensureClusterTokens();
  const work = await mkdtemp(join(options.work, 'wc-placement-'));
  const logDir = join(work, 'logs');
  await mkdir(logDir, { recursive: true });
  log(
    `(a) work dir ${work} (${options.keep ? 'kept' : 'removed at the end; --keep keeps it'}); logs in ${logDir}`,
  );
  let testbed: Testbed | undefined;
  try {
    testbed = await createTestbed({
      hosts: options.nodes + 1,
      hostMbps: options.nodeMbps,
      originMbps: options.clientMbps,
    });
    return await runOnTestbed(testbed, options, work, logDir);
  } finally {
    await testbed?.close();
    if (!options.keep) await rm(work, { recursive: true, force: true });
  }
}

interface Context {
  testbed: Testbed;
  options: NetnsOptions;
  work: string;
  logDir: string;
  manifest: Manifest;
  manifestPath: string;
  schedulerUrl: string;
  seedNodes: readonly Endpoint[];
}

async function runOnTestbed(
  testbed: Testbed,
  options: NetnsOptions,
  work: string,
  logDir: string,
): Promise<NetnsResult> {
  const { log } = options;
  const seedNodes = testbed.hosts.slice(0, options.nodes);
  const schedulerHost = testbed.hosts[options.nodes]!;
  log(
    `(a) testbed: client ${testbed.origin.ns} at ${options.clientMbps} Mbit/s; seed nodes ` +
      `${seedNodes.map((node) => node.label).join(', ')} at ${options.nodeMbps} Mbit/s each; ` +
      `scheduler on ${schedulerHost.label} (${options.nodeMbps} Mbit/s)`,
  );
  const model = await prepareModel(work, options);
  const schedulerUrl = await startService(
    testbed,
    schedulerHost,
    [
      'scheduler',
      '--host',
      schedulerHost.address,
      '--port',
      String(SCHEDULER_PORT),
      '--catalog',
      join(work, 'catalog'),
    ],
    logDir,
    'scheduler',
  );
  const context: Context = { testbed, options, work, logDir, ...model, schedulerUrl, seedNodes };
  for (const node of seedNodes.slice(0, NODES_BEFORE)) await startSeedNode(context, node);
  await putModel(context);
  for (const node of seedNodes.slice(NODES_BEFORE)) await startSeedNode(context, node);

  const total = totalBytes(model.manifest);
  const before = await timedPull(context, 'before', NODES_BEFORE);
  const distribute = await distributeRoundRobin(context);
  const after = await timedPull(context, 'after', options.nodes);
  return {
    options: withoutLog(options),
    totalBytes: total,
    pieces: model.manifest.files.reduce((sum, file) => sum + file.pieces.length, 0),
    nodeLabels: seedNodes.map((node) => node.label),
    before,
    distribute,
    after,
  };
}

function withoutLog(options: NetnsOptions): Omit<NetnsOptions, 'log'> {
  const { nodes, nodeMbps, clientMbps, sizeMb, pieceMb, concurrency, work, keep } = options;
  return { nodes, nodeMbps, clientMbps, sizeMb, pieceMb, concurrency, work, keep };
}

async function prepareModel(
  work: string,
  options: NetnsOptions,
): Promise<{ manifest: Manifest; manifestPath: string; modelDir: string }> {
  const modelDir = join(work, 'model');
  options.log(`(a) synthesising a ${options.sizeMb} MiB model in ${options.pieceMb} MiB pieces`);
  await synthesizeModel({
    dir: modelDir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: options.sizeMb * MiB,
    seed: 1,
  });
  const local = new LocalOrigin(modelDir);
  const manifest = await buildManifest(local, { pieceSize: options.pieceMb * MiB }).finally(() =>
    local.close(),
  );
  const manifestPath = join(work, 'manifest.json');
  await writeManifest(manifestPath, manifest);
  return { manifest, manifestPath, modelDir };
}

function spawnCli(
  testbed: Testbed,
  endpoint: Endpoint,
  args: readonly string[],
  logDir: string,
  name: string,
): ChildProcess {
  const child = testbed.spawnIn(endpoint.ns, [NODE, CLI, ...args]);
  saveOutput(child, join(logDir, `${name}.log`));
  return child;
}

async function startService(
  testbed: Testbed,
  endpoint: Endpoint,
  args: readonly string[],
  logDir: string,
  name: string,
): Promise<string> {
  const child = spawnCli(testbed, endpoint, args, logDir, name);
  const match = await firstMatch(child, /listening on (\S+)/, START_TIMEOUT_MS, name);
  return match[1]!;
}

/** Starts a seed node; its listening line comes after it registered with the catalog. */
async function startSeedNode(context: Context, node: Endpoint): Promise<void> {
  await startService(
    context.testbed,
    node,
    [
      'agent',
      '--role',
      'seed',
      '--scheduler',
      context.schedulerUrl,
      '--cache',
      join(context.work, 'nodes', node.label),
      '--host',
      node.address,
      '--port',
      String(NODE_PORT),
      '--name',
      node.label,
    ],
    context.logDir,
    `seed-${node.label}`,
  );
}

function stepTimeoutMs(context: Context, mbps: number): number {
  const fluidMs = (totalBytes(context.manifest) * 8) / (mbps * 1e3);
  return Math.max(STEP_TIMEOUT_MIN_MS, STEP_TIMEOUT_FACTOR * fluidMs);
}

interface CliRun {
  seconds: number;
  stdout: string;
}

/** Runs a CLI command to its exit within `timeoutMs`; rejects with its last words when it fails. */
async function runCli(
  context: Context,
  endpoint: Endpoint,
  args: readonly string[],
  timeoutMs: number,
  name: string,
): Promise<CliRun> {
  const started = performance.now();
  const child = spawnCli(context.testbed, endpoint, args, context.logDir, name);
  let stdout = '';
  child.stdout?.setEncoding('utf8').on('data', (text: string) => {
    // The JSON lines we read are few; a bounded copy is enough.
    stdout = (stdout + text).slice(-4 * MiB);
  });
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const exit = await waitForExit(child, timeoutMs);
  const seconds = (performance.now() - started) / 1000;
  if (exit === undefined) {
    await stopChild(child);
    throw new Error(`${name}: still running after ${Math.round(timeoutMs / 1000)} s`);
  }
  await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 5000).unref())]);
  if (exit.code !== 0) {
    const { stderr } = tailOf(child);
    const said = (stderr.trim() || stdout.trim()).split('\n').slice(-3).join(' / ');
    throw new Error(`${name}: exit ${exit.code ?? exit.signal}: ${said}`);
  }
  return { seconds, stdout };
}

function jsonLines(stdout: string): Array<Record<string, unknown>> {
  return stdout.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

async function putModel(context: Context): Promise<void> {
  const { options } = context;
  const args = [
    'put',
    join(context.work, 'model'),
    '--scheduler',
    context.schedulerUrl,
    '--placement',
    'round-robin',
    '--manifest',
    context.manifestPath,
    '--json',
  ];
  const mbps = Math.min(options.clientMbps, NODES_BEFORE * options.nodeMbps);
  options.log(`(a) put onto the ${NODES_BEFORE} seed nodes started so far`);
  const run = await runCli(context, context.testbed.origin, args, stepTimeoutMs(context, mbps), 'put');
  options.log(`(a) put took ${run.seconds.toFixed(1)} s`);
}

async function timedPull(context: Context, label: string, layoutNodes: number): Promise<PullLeg> {
  const { options, testbed } = context;
  const total = totalBytes(context.manifest);
  const boundSeconds = pullBoundSeconds(total, options.clientMbps, layoutNodes, options.nodeMbps);
  const dir = join(context.work, `pull-${label}`);
  const args = [
    'pull',
    manifestDigest(context.manifest),
    '--seeds',
    context.schedulerUrl,
    '--to',
    dir,
    '--manifest',
    context.manifestPath,
    '--concurrency',
    String(options.concurrency),
    '--json',
  ];
  const timeoutMs = stepTimeoutMs(context, Math.min(options.clientMbps, layoutNodes * options.nodeMbps));
  options.log(`(a) pull ${label}: ${layoutNodes} nodes hold the model; bound ${boundSeconds.toFixed(2)} s`);
  const txBefore = await txOfNodes(testbed, context.seedNodes);
  const leg: PullLeg = {
    label,
    layoutNodes,
    seconds: undefined,
    transferSeconds: undefined,
    wire: undefined,
    boundSeconds,
    verified: false,
    bytesByNode: [],
  };
  const sampler = new DownloadSampler(testbed.origin.bridgePort, timeoutMs);
  try {
    const run = await runCli(context, testbed.origin, args, timeoutMs, `pull-${label}`);
    leg.seconds = run.seconds;
    leg.wire = sampler.window(total / 100, total - total / 100);
    const done = jsonLines(run.stdout).find((line) => line['event'] === 'done');
    if (typeof done?.['seconds'] === 'number') leg.transferSeconds = done['seconds'];
  } catch (error) {
    leg.problem = error instanceof Error ? error.message : String(error);
  } finally {
    sampler.stop();
  }
  const txAfter = await txOfNodes(testbed, context.seedNodes);
  leg.bytesByNode = txAfter.map((bytes, index) => bytes - (txBefore[index] ?? 0));
  if (leg.seconds !== undefined) {
    const report = await verifyDirectory(dir, context.manifest);
    leg.verified = report.ok;
    if (!report.ok) leg.problem = `the pulled copy does not verify`;
  }
  if (!options.keep) await rm(dir, { recursive: true, force: true });
  options.log(
    `(a) pull ${label}: ${leg.seconds === undefined ? 'failed' : `${leg.seconds.toFixed(2)} s`}, ` +
      `${leg.verified ? 'verified' : 'NOT verified'}${leg.problem === undefined ? '' : `: ${leg.problem}`}`,
  );
  return leg;
}

/** How often the client's download counter is sampled during a pull. */
const SAMPLE_MS = 25;

/**
 * Samples the client's download (the TX counter of its bridge port, read from sysfs in the root
 * namespace: no process per sample) so a pull's time splits into start, wire time and finish.
 */
class DownloadSampler {
  readonly #path: string;
  readonly #startedMs = performance.now();
  readonly #base: number;
  readonly #samples: Array<{ ms: number; bytes: number }> = [];
  readonly #timer: NodeJS.Timeout;
  readonly #samplesMax: number;

  constructor(bridgePort: string, timeoutMs: number) {
    this.#path = `/sys/class/net/${bridgePort}/statistics/tx_bytes`;
    this.#base = this.#read() ?? 0;
    this.#samplesMax = Math.ceil(timeoutMs / SAMPLE_MS) + 1;
    this.#timer = setInterval(() => this.#sample(), SAMPLE_MS);
  }

  #read(): number | undefined {
    try {
      return Number(readFileSync(this.#path, 'utf8'));
    } catch {
      return undefined;
    }
  }

  #sample(): void {
    const bytes = this.#read();
    if (bytes === undefined || this.#samples.length >= this.#samplesMax) return this.stop();
    this.#samples.push({ ms: performance.now() - this.#startedMs, bytes: bytes - this.#base });
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** Seconds from the start until the download first passed `low` bytes and `high` bytes. */
  window(low: number, high: number): { firstSeconds: number; lastSeconds: number } | undefined {
    const first = this.#samples.find((sample) => sample.bytes >= low);
    const last = this.#samples.find((sample) => sample.bytes >= high);
    if (first === undefined || last === undefined) return undefined;
    return { firstSeconds: first.ms / 1000, lastSeconds: last.ms / 1000 };
  }
}

function txOfNodes(testbed: Testbed, nodes: readonly Endpoint[]): Promise<number[]> {
  return Promise.all(nodes.map((node) => testbed.txBytes(node.ns)));
}

async function distributeRoundRobin(context: Context): Promise<DistributeStep> {
  const { options } = context;
  const schedulerHost = context.testbed.hosts[options.nodes]!;
  const args = [
    'distribute',
    manifestDigest(context.manifest),
    '--scheduler',
    context.schedulerUrl,
    '--mode',
    'round-robin',
    '--apply',
    '--json',
    '--state',
    join(context.work, 'distribute-state'),
    '--grace-ms',
    String(GRACE_MS),
    // The two verified pulls are this benchmark's whole-file check; reading the model back through
    // the scheduler's capped link twice would only add minutes.
    '--no-file-hashes',
  ];
  options.log('(a) distribute --mode round-robin --apply');
  const step: DistributeStep = { seconds: undefined, moves: 0, bytesCopied: 0, committed: 0 };
  try {
    const run = await runCli(
      context,
      schedulerHost,
      args,
      stepTimeoutMs(context, NODES_BEFORE * options.nodeMbps),
      'distribute',
    );
    step.seconds = run.seconds;
    for (const line of jsonLines(run.stdout)) {
      if (line['event'] === 'plan') {
        const counts = line['counts'] as { primary?: number; replica?: number; bytes?: number } | undefined;
        step.moves += (counts?.primary ?? 0) + (counts?.replica ?? 0);
        step.bytesCopied += counts?.bytes ?? 0;
      } else if (line['event'] === 'done' && typeof line['committed'] === 'number') {
        step.committed = line['committed'];
      }
    }
  } catch (error) {
    step.problem = error instanceof Error ? error.message : String(error);
  }
  options.log(
    `(a) distribute: ${step.seconds === undefined ? `failed: ${step.problem}` : `${step.seconds.toFixed(1)} s`}, ` +
      `${step.moves} moves, ${formatBytes(step.bytesCopied)} copied`,
  );
  return step;
}

/** The table of part (a), with the verdict on the goal under it. */
export function formatNetnsTable(result: NetnsResult): string {
  const { options } = result;
  const header = [
    'layout',
    'T pull',
    'bound',
    'T / bound',
    'spawn to exit (/ bound)',
    'wire 1 %..99 % (/ 0.98 x bound)',
    'verified',
    ...result.nodeLabels.map((label) => `${label} sent`),
  ];
  const row = (leg: PullLeg, layout: string): string[] => [
    layout,
    leg.transferSeconds === undefined ? 'failed' : `${leg.transferSeconds.toFixed(2)} s`,
    `${leg.boundSeconds.toFixed(2)} s`,
    leg.transferSeconds === undefined ? '-' : (leg.transferSeconds / leg.boundSeconds).toFixed(3),
    leg.seconds === undefined
      ? '-'
      : `${leg.seconds.toFixed(2)} s (${(leg.seconds / leg.boundSeconds).toFixed(3)})`,
    leg.wire === undefined
      ? '-'
      : `${leg.wire.firstSeconds.toFixed(2)}..${leg.wire.lastSeconds.toFixed(2)} s ` +
        `(${((leg.wire.lastSeconds - leg.wire.firstSeconds) / (0.98 * leg.boundSeconds)).toFixed(3)})`,
    leg.verified ? 'yes' : 'NO',
    ...leg.bytesByNode.map((bytes) => formatBytes(bytes)),
  ];
  const { distribute } = result;
  const lines = [
    `S = ${formatBytes(result.totalBytes)} in ${result.pieces} pieces of ${options.pieceMb} MiB; ` +
      `K = ${options.nodes} seed nodes at ${options.nodeMbps} Mbit/s each; client link ${options.clientMbps} Mbit/s; ` +
      `pull --concurrency ${options.concurrency}. T pull = the pull's own clock (seed source opened to last ` +
      `file verified); spawn to exit adds the CLI's start. Bound = S / min(client, n x node), raw link rate ` +
      `(payload is ${(TCP_PAYLOAD_SHARE * 100).toFixed(1)} % of it, so a perfect run is about ` +
      `${(1 / TCP_PAYLOAD_SHARE).toFixed(3)} x bound).`,
    ...renderTable(header, [
      row(result.before, `before: on ${result.before.layoutNodes} nodes`),
      row(result.after, `after round-robin: ${result.after.layoutNodes} nodes`),
    ]),
    `distribute --mode round-robin --apply: ` +
      (distribute.seconds === undefined
        ? `FAILED: ${distribute.problem ?? 'unknown'}`
        : `${distribute.seconds.toFixed(1)} s, ${distribute.moves} moves (${distribute.committed} committed), ` +
          `${formatBytes(distribute.bytesCopied)} copied (grace ${GRACE_MS} ms, no whole-file hashes)`),
  ];
  for (const leg of [result.before, result.after]) {
    if (leg.problem !== undefined) lines.push(`pull ${leg.label}: ${leg.problem}`);
  }
  const served = everyNodeServed(result.after, result.totalBytes);
  const { after, before } = result;
  const ratio = after.transferSeconds === undefined ? undefined : after.transferSeconds / after.boundSeconds;
  lines.push(
    `goal (after round-robin every node serves; T pull within ${GOAL_RATIO} x bound): ` +
      `${goalMet(result) ? 'MET' : 'NOT MET'} (every node served: ${served ? 'yes' : 'no'}; ` +
      `T / bound = ${ratio === undefined ? '-' : ratio.toFixed(3)}; speed-up over the 2-node layout: ` +
      (before.transferSeconds !== undefined && after.transferSeconds !== undefined
        ? `${(before.transferSeconds / after.transferSeconds).toFixed(2)} x`
        : '-') +
      ')',
  );
  return lines.join('\n');
}
