/**
 * `npm run bench:fanout`: one model to N hosts, two ways, on the same testbed. The naive leg has
 * every host pull from the origin at once; the swarm leg runs the weightcast scheduler next to the
 * origin and an agent on every host, asks every agent for the model at once through its local API
 * (the request a loader on that host makes), then has every host copy the model out with
 * `pull --agent`. Each leg prints
 * T_last (until the last host finished), efficiency against the fluid bound, origin bytes per model
 * copy and the median host, next to the simulator's prediction for the same setting.
 *
 * The testbed is a namespace per host on a Linux bridge with tc caps on every link (`netns/`).
 * Without root or `ip netns` (or with --loopback) it says so and runs on 127.0.0.1, where the only
 * caps are the processes' own: the agents' --upload-mbps/--download-mbps and the origin server's
 * --rate-mbps when it has one.
 *
 * Diagnostics: with WEIGHTCAST_TRACE_PIECES=1 and --keep, the agents trace every piece and
 * `bench/trace-report.ts` reads the kept logs (transfers in flight per host and parent, timeline).
 *
 * Flags: see USAGE below.
 */

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { buildManifest } from '../src/manifest/build.js';
import { manifestDigest, totalBytes, totalPieces, writeManifest } from '../src/manifest/manifest.js';
import { LocalOrigin } from '../src/origin/local.js';
import { parseHedgeTail, parseRingParents } from '../src/cli/swarm-flags.js';
import { RING_PARENTS_DEFAULT } from '../src/swarm/core/index.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { formatBytes } from '../src/util/units.js';
import {
  ChildRegistry,
  firstMatch,
  onAbruptEnd,
  saveOutput,
  stopChild,
  tailOf,
  waitForExit,
} from './netns/children.js';
import {
  HOSTS_MAX,
  MBPS_MAX,
  MBPS_MIN,
  MTU_MAX,
  MTU_MIN,
  tcpPayloadShare,
  type Endpoint,
} from './netns/plan.js';
import {
  formatOptionalNumber,
  formatOptionalSeconds,
  CLOCK_TICKS_PER_SECOND,
  legFailed,
  lowerBoundSeconds,
  naiveFluidSeconds,
  parseMachineBusyTicks,
  parseProcStatTicks,
  relativeError,
  renderTable,
  summarizeLeg,
  type LegMeasurement,
  type LegSummary,
  type Setting,
} from './netns/report.js';
import { createTestbed, LoopbackHosts, netnsProblem, type HostSet } from './netns/testbed.js';

const MiB = 1024 * 1024;
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'bin', 'weightcast.js');
const JOIN_CLIENT = fileURLToPath(new URL('./netns/join-client.js', import.meta.url));
const FILE_SERVER = join(ROOT, 'dist', 'src', 'origin', 'file-server-main.js');
const NODE = process.execPath;

/** How long a service may take to print its listening line. */
const START_TIMEOUT_MS = 30_000;
/** Every leg gets at least this long, and at least `LEG_TIMEOUT_FACTOR` x its fluid time. */
const LEG_TIMEOUT_MIN_MS = 120_000;
const LEG_TIMEOUT_FACTOR = 5;
const SIM_TIMEOUT_MS = 300_000;
/** How long to wait after a child's exit for the rest of its output. */
const PIPE_DRAIN_MS = 5000;
const VERIFY_TIMEOUT_MS = 300_000;
/** Copies verified at once: hashing is CPU-bound and the benchmark is sized for 2 cores. */
const VERIFY_PARALLEL = 2;
/** The swarm services' ports inside the namespaces (each host has its own address). */
const SCHEDULER_PORT = 7000;
const AGENT_PORT = 7001;
/**
 * The testbed's links run jumbo frames, as GPU clusters' fabrics do: at MTU 1500 tbf's count of
 * headers alone holds TCP payload to 0.956 of every cap (`--mtu 1500` shows it).
 */
const MTU_TESTBED_DEFAULT = 9000;

const LEGS = ['naive', 'swarm'] as const;
type Leg = (typeof LEGS)[number];

interface Options {
  hosts: number;
  sizeMb: number;
  mbps: number;
  originMbps: number;
  /** Undefined: the manifest's default for the model's size (defaultPieceSize). */
  pieceMb: number | undefined;
  originReaders: number | undefined;
  legs: Leg[];
  work: string;
  loopback: boolean;
  keep: boolean;
  json: boolean;
  /** Skip the pull --agent copy-out (profiling the swarm alone); the agents' caches are verified instead. */
  skipCopyOut: boolean;
  /** Size of the model the agents fetch first, unmeasured (0: none). */
  warmUpMb: number;
  /** Ring pairings (SwarmConfig.ringParents) for the scheduler and the simulator (0: off). */
  ringParents: number;
  /** Pieces each host downloads and uploads at once (scheduler and simulator); undefined: their default. */
  downloads: number | undefined;
  uploads: number | undefined;
  /** Hedged tail pieces per host (scheduler and simulator); undefined: their default. */
  hedgeTail: number | undefined;
  /** The testbed links' MTU (netns only). */
  mtu: number;
}

class UsageError extends Error {}

const USAGE = [
  'usage: npm run bench:fanout -- [flags]',
  '  --hosts N (8)  --size-mb S (256)  --mbps B (200)  --origin-mbps U (B)',
  `  --mtu M (${MTU_TESTBED_DEFAULT}: jumbo frames; netns testbed only)`,
  "  --piece-mb P (the manifest's default for the model's size: 0.5 at 256 MiB; 0.25 is 256 KiB)",
  "  --origin-readers K (the simulator's choice)  --ring-parents K (the scheduler's default)",
  "  --downloads K  --uploads K (pieces per host at once; the scheduler's default)",
  "  --hedge-tail N (each host's last N pieces may be hedged; the scheduler's default)",
  '  --legs naive,swarm (both)  --skip-copy-out  --warm-up-mb M (64)',
  '  --work DIR (the temp dir)  --loopback  --keep  --json',
].join('\n');

function parseOptions(argv: readonly string[]): Options | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      hosts: { type: 'string', default: '8' },
      'size-mb': { type: 'string', default: '256' },
      mbps: { type: 'string', default: '200' },
      'origin-mbps': { type: 'string' },
      'piece-mb': { type: 'string' },
      'origin-readers': { type: 'string' },
      legs: { type: 'string', default: LEGS.join(',') },
      work: { type: 'string', default: tmpdir() },
      loopback: { type: 'boolean', default: false },
      keep: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      'skip-copy-out': { type: 'boolean', default: false },
      'warm-up-mb': { type: 'string', default: '64' },
      mtu: { type: 'string', default: String(MTU_TESTBED_DEFAULT) },
      'ring-parents': { type: 'string', default: String(RING_PARENTS_DEFAULT) },
      downloads: { type: 'string' },
      uploads: { type: 'string' },
      'hedge-tail': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const mbps = number(values.mbps, '--mbps', MBPS_MIN, MBPS_MAX);
  const legs = values.legs.split(',').map((leg) => leg.trim());
  for (const leg of legs) {
    if (!(LEGS as readonly string[]).includes(leg)) throw new UsageError(`--legs: unknown leg ${leg}`);
  }
  return {
    hosts: integer(values.hosts, '--hosts', 1, HOSTS_MAX),
    sizeMb: integer(values['size-mb'], '--size-mb', 1, 1024 * 1024),
    mbps,
    originMbps:
      values['origin-mbps'] === undefined
        ? mbps
        : number(values['origin-mbps'], '--origin-mbps', MBPS_MIN, MBPS_MAX),
    pieceMb: values['piece-mb'] === undefined ? undefined : pieceMb(values['piece-mb']),
    originReaders:
      values['origin-readers'] === undefined
        ? undefined
        : integer(values['origin-readers'], '--origin-readers', 1, 1024),
    legs: legs as Leg[],
    work: values.work,
    loopback: values.loopback,
    keep: values.keep,
    json: values.json,
    skipCopyOut: values['skip-copy-out'],
    warmUpMb: integer(values['warm-up-mb'], '--warm-up-mb', 0, 4096),
    mtu: integer(values.mtu, '--mtu', MTU_MIN, MTU_MAX),
    ringParents: parseRingParents(values['ring-parents']),
    downloads: values.downloads === undefined ? undefined : integer(values.downloads, '--downloads', 1, 64),
    uploads: values.uploads === undefined ? undefined : integer(values.uploads, '--uploads', 1, 64),
    hedgeTail: values['hedge-tail'] === undefined ? undefined : parseHedgeTail(values['hedge-tail']),
  };
}

/** `--downloads`, `--uploads` and `--hedge-tail` as given, for the scheduler and the simulator alike. */
function schedulingFlags(options: Options): string[] {
  return [
    ...(options.downloads === undefined ? [] : ['--downloads', String(options.downloads)]),
    ...(options.uploads === undefined ? [] : ['--uploads', String(options.uploads)]),
    ...(options.hedgeTail === undefined ? [] : ['--hedge-tail', String(options.hedgeTail)]),
  ];
}

function number(text: string, what: string, min: number, max: number): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value < min || value > max) {
    throw new UsageError(`${what} must be a number ${min}-${max}, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** Piece size in MiB: 1/16 (64 KiB, the manifest's smallest) to 1024, a whole number of bytes. */
function pieceMb(text: string): number {
  const value = number(text, '--piece-mb', 1 / 16, 1024);
  if (!Number.isInteger(value * MiB))
    throw new UsageError(`--piece-mb must be a whole number of bytes, got ${text}`);
  return value;
}

function integer(text: string, what: string, min: number, max: number): number {
  const value = number(text, what, min, max);
  if (!Number.isInteger(value)) throw new UsageError(`${what} must be an integer, got ${text}`);
  return value;
}

const log = (text: string): void => void process.stderr.write(`${text}\n`);

interface Model {
  dir: string;
  manifestPath: string;
  totalBytes: number;
  pieceBytes: number;
  pieces: number;
  digest: string;
}

/**
 * The model under test in `<work>/model`; with `warmUpMb`, a small second model in
 * `<work>/model/warm-up/` (after the first's manifest is made, so not part of it) that the agents
 * fetch before the measured run: agents are long-running daemons, and a fresh Node process spends
 * its first seconds compiling its hot paths.
 */
async function prepareModel(work: string, options: Options, warmUp = false): Promise<Model> {
  const dir = warmUp ? join(work, 'model', 'warm-up') : join(work, 'model');
  const sizeMb = warmUp ? options.warmUpMb : options.sizeMb;
  log(`synthesising a ${sizeMb} MiB Llama-style checkpoint in ${dir}${warmUp ? ' (warm-up)' : ''}`);
  await synthesizeModel({ dir, arch: 'llama', dtype: 'bf16', sizeBytes: sizeMb * MiB, seed: warmUp ? 2 : 1 });
  const local = new LocalOrigin(dir);
  const pieceSize = options.pieceMb === undefined ? {} : { pieceSize: options.pieceMb * MiB };
  const manifest = await buildManifest(local, pieceSize).finally(() => local.close());
  const manifestPath = join(work, warmUp ? 'warm-up-manifest.json' : 'manifest.json');
  await writeManifest(manifestPath, manifest);
  return {
    dir,
    manifestPath,
    totalBytes: totalBytes(manifest),
    pieceBytes: manifest.pieceSize,
    pieces: totalPieces(manifest),
    digest: manifestDigest(manifest),
  };
}

interface SimPrediction {
  tLastSeconds: number;
  p50Seconds: number;
  efficiency: number;
  originRatio: number;
  originReaders: number;
  incomplete: boolean;
}

/**
 * `weightcast sim` for the same setting, as a process of its own (root namespace, uncapped), with
 * links at `payloadShare` of their caps: on the testbed tc counts every packet's headers, so TCP
 * payload moves at 1448/1514 of each cap, and the simulator moves payload.
 */
async function predict(
  setting: Setting,
  pieceBytes: number,
  options: Options,
  root: ChildRegistry,
  payloadShare: number,
): Promise<SimPrediction | string> {
  const args = [
    CLI,
    'sim',
    '--hosts',
    String(setting.hosts),
    '--size-gb',
    String(setting.totalBytes / 1e9),
    '--piece-mb',
    String(pieceBytes / MiB),
    '--host-mbps',
    String(setting.hostMbps * payloadShare),
    '--origin-mbps',
    String(setting.originMbps * payloadShare),
    ...(options.originReaders === undefined ? [] : ['--origin-readers', String(options.originReaders)]),
    '--ring-parents',
    String(options.ringParents),
    ...schedulingFlags(options),
    '--json',
  ];
  log(`predicting with: weightcast ${args.slice(1).join(' ')}`);
  const child = root.track(spawn(NODE, args, { stdio: 'pipe' }));
  // Its JSON may still be in the pipe when it exits: read until the pipes close too.
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const exit = await waitForExit(child, SIM_TIMEOUT_MS);
  if (exit === undefined) {
    await stopChild(child);
    return `sim did not finish within ${SIM_TIMEOUT_MS / 1000} s`;
  }
  await Promise.race([closed, sleep(PIPE_DRAIN_MS, undefined, { ref: false })]);
  const { stdout, stderr } = tailOf(child);
  try {
    const result = JSON.parse(stdout.trim().split('\n').pop() ?? '') as {
      tLastMs: unknown;
      p50Ms: number;
      efficiency: number;
      originRatio: number;
      incomplete: boolean;
      options: { originReaders: number };
    };
    if (typeof result.tLastMs !== 'number') throw new Error('no tLastMs');
    return {
      tLastSeconds: result.tLastMs / 1000,
      p50Seconds: result.p50Ms / 1000,
      efficiency: result.efficiency,
      originRatio: result.originRatio,
      originReaders: result.options.originReaders,
      incomplete: result.incomplete,
    };
  } catch {
    return `sim exited ${exit.code ?? exit.signal}: ${stderr.trim() || stdout.trim()}`;
  }
}

/** Loopback only: whether the origin file server can cap its own rate (`--rate-mbps`). */
function fileServerHasRateCap(): boolean {
  return existsSync(FILE_SERVER) && readFileSync(FILE_SERVER, 'utf8').includes('rate-mbps');
}

/** `hostSet.spawnIn`, with the child's output also appended to `<logDir>/<name>.log`. */
function spawnLogged(
  hostSet: HostSet,
  ns: string,
  argv: readonly string[],
  logDir: string,
  name: string,
): ChildProcess {
  const child = hostSet.spawnIn(ns, argv);
  saveOutput(child, join(logDir, `${name}.log`));
  return child;
}

async function startOrigin(hostSet: HostSet, model: Model, logDir: string): Promise<string> {
  const capped = hostSet.mode === 'loopback' && fileServerHasRateCap();
  if (hostSet.mode === 'loopback' && !capped) {
    log('NOTE: the origin file server has no --rate-mbps yet: on loopback the origin is not capped');
  }
  const argv = [
    NODE,
    FILE_SERVER,
    '--root',
    model.dir,
    '--host',
    hostSet.origin.address,
    '--port',
    '0',
    ...(capped ? ['--rate-mbps', String(hostSet.origin.mbps)] : []),
  ];
  const server = spawnLogged(hostSet, hostSet.origin.ns, argv, logDir, 'origin');
  const line = await firstMatch(server, /^\{.*"url".*\}$/, START_TIMEOUT_MS, 'origin file server');
  return (JSON.parse(line[0]) as { url: string }).url;
}

interface HostRun {
  seconds: number | undefined;
  problem?: string;
}

/**
 * Starts `argvFor(host)` on every host at once and times each to its exit. A run that fails or is
 * still going at `timeoutMs` counts as unfinished (and is stopped).
 *
 * "At once" through a starting gate: each host's command first waits in a shell that has said
 * `ready`; once every shell has, the clock starts and all are released together. Spawning a process
 * in a namespace takes ~10 ms on this machine, so without the gate the eighth host's request went
 * out ~90 ms after the first and that skew counted as the system's time. A `selfGated` command
 * (the swarm's join client) does the waiting itself, after its own start-up. `onRelease` runs just
 * before the release, for readings that should not count the commands' start-up.
 */
async function runOnEveryHost(
  hostSet: HostSet,
  argvFor: (host: Endpoint, index: number) => string[],
  timeoutMs: number,
  logAs: { dir: string; name: string },
  gate: { selfGated?: boolean; onRelease?: () => void } = {},
): Promise<HostRun[]> {
  const children = hostSet.hosts.map((host, index) =>
    spawnLogged(
      hostSet,
      host.ns,
      gate.selfGated === true
        ? argvFor(host, index)
        : ['sh', '-c', 'echo ready; read go; exec "$@"', 'gate', ...argvFor(host, index)],
      logAs.dir,
      `${logAs.name}-${host.label}`,
    ),
  );
  await Promise.all(
    children.map((child, index) =>
      firstMatch(
        child,
        /^ready$/,
        START_TIMEOUT_MS,
        `${logAs.name} on ${hostSet.hosts[index]?.label ?? index}`,
      ),
    ),
  );
  gate.onRelease?.();
  const started = performance.now();
  for (const child of children) child.stdin?.end('go\n');
  return Promise.all(
    children.map(async (child, index): Promise<HostRun> => {
      const exit = await waitForExit(child, timeoutMs - (performance.now() - started));
      const seconds = (performance.now() - started) / 1000;
      const label = hostSet.hosts[index]?.label ?? String(index);
      if (exit === undefined) {
        await stopChild(child);
        return { seconds: undefined, problem: `${label}: still running after ${timeoutMs / 1000} s` };
      }
      if (exit.code !== 0) return { seconds: undefined, problem: `${label}: ${exitText(exit, child)}` };
      return { seconds };
    }),
  );
}

function exitText(exit: { code: number | null; signal: string | null }, child: ChildProcess): string {
  const { stdout, stderr } = tailOf(child);
  const said = (stderr.trim() || stdout.trim()).split('\n').slice(-3).join(' / ');
  return `exit ${exit.code ?? exit.signal}${said === '' ? '' : `: ${said}`}`;
}

/**
 * CPU seconds used so far by this process, the children it has reaped, and its live children (`pids`).
 * Two readings bracket a leg: a child that exits in between moves from the live sum to the reaped one.
 */
function cpuSecondsUsed(pids: readonly number[]): number | undefined {
  const self = readTicks('self');
  if (self === undefined) return undefined;
  let ticks = self.own + self.reapedChildren;
  for (const pid of pids) ticks += readTicks(String(pid))?.own ?? 0;
  return ticks / CLOCK_TICKS_PER_SECOND;
}

function machineBusySeconds(): number | undefined {
  try {
    const ticks = parseMachineBusyTicks(readFileSync('/proc/stat', 'utf8'));
    return ticks === undefined ? undefined : ticks / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

function readTicks(pid: string): { own: number; reapedChildren: number } | undefined {
  try {
    return parseProcStatTicks(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/** `weightcast verify` on every host's copy, `VERIFY_PARALLEL` at a time; the number that match. */
async function verifyCopies(hostSet: HostSet, dirs: readonly string[], model: Model): Promise<number> {
  let verified = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let index = next++; index < dirs.length; index = next++) {
      const host = hostSet.hosts[index];
      const dir = dirs[index];
      if (host === undefined || dir === undefined) continue;
      const argv = [NODE, CLI, 'verify', dir, '--manifest', model.manifestPath, '--json'];
      const child = hostSet.spawnIn(host.ns, argv);
      const exit = await waitForExit(child, VERIFY_TIMEOUT_MS);
      if (exit?.code === 0) verified++;
      else {
        if (exit === undefined) await stopChild(child);
        log(
          `  ${host.label}: copy does NOT verify: ${exit === undefined ? 'timed out' : exitText(exit, child)}`,
        );
      }
    }
  };
  await Promise.all(Array.from({ length: VERIFY_PARALLEL }, worker));
  return verified;
}

interface LegContext {
  hostSet: HostSet;
  model: Model;
  originUrl: string;
  setting: Setting;
  work: string;
  logDir: string;
  options: Options;
  sim: SimPrediction | string;
}

/** Runs the pulls of one leg between two readings of the origin's TX counter, then verifies. */
async function measurePulls(
  context: LegContext,
  leg: string,
  pullArgv: (host: Endpoint, index: number, dir: string) => string[],
  timeoutMs: number,
): Promise<LegMeasurement> {
  const { hostSet, work, model } = context;
  const dirs = hostSet.hosts.map((host) => join(work, leg, host.label));
  const measured = await measureRuns(
    context,
    leg,
    (host, index) => pullArgv(host, index, dirs[index] ?? ''),
    timeoutMs,
  );
  log(`${leg}: verifying ${dirs.length} copies`);
  const hostsVerified = await verifyCopies(hostSet, dirs, model);
  if (!context.options.keep) await rm(join(work, leg), { recursive: true, force: true });
  return { ...measured, hostsVerified };
}

/** Runs one command per host at once between two readings of the origin's TX counter and the CPU clocks. */
async function measureRuns(
  context: LegContext,
  leg: string,
  argvFor: (host: Endpoint, index: number) => string[],
  timeoutMs: number,
  selfGated = false,
): Promise<LegMeasurement> {
  const { hostSet } = context;
  const txBefore = await hostSet.txBytes(hostSet.origin.ns);
  // Read at the release: the commands' own start-up (before the gate) is not the leg's work.
  let cpuBefore: number | undefined;
  let machineBefore: number | undefined;
  let started = performance.now();
  log(`${leg}: ${hostSet.hosts.length} hosts at once (timeout ${Math.round(timeoutMs / 1000)} s)`);
  const runs = await runOnEveryHost(
    hostSet,
    argvFor,
    timeoutMs,
    { dir: context.logDir, name: leg },
    {
      selfGated,
      onRelease: () => {
        cpuBefore = cpuSecondsUsed(hostSet.livePids());
        machineBefore = machineBusySeconds();
        started = performance.now();
      },
    },
  );
  const cpuAfter = cpuSecondsUsed(hostSet.livePids());
  const machineAfter = machineBusySeconds();
  const wallSeconds = (performance.now() - started) / 1000;
  const originBytes = (await hostSet.txBytes(hostSet.origin.ns)) - txBefore;
  const cpuCores =
    cpuBefore === undefined || cpuAfter === undefined ? undefined : (cpuAfter - cpuBefore) / wallSeconds;
  const machineCores =
    machineBefore === undefined || machineAfter === undefined
      ? undefined
      : (machineAfter - machineBefore) / wallSeconds;
  for (const run of runs) if (run.problem !== undefined) log(`  ${run.problem}`);
  if (cpuBefore !== undefined && cpuAfter !== undefined) {
    const delivered = (hostSet.hosts.length * context.model.totalBytes) / 2 ** 30;
    const cpu = cpuAfter - cpuBefore;
    log(
      `${leg}: our processes used ${cpu.toFixed(1)} CPU-s, ${(cpu / delivered).toFixed(2)} per GiB delivered`,
    );
  }
  const problems = runs.flatMap((run) => (run.problem === undefined ? [] : [run.problem]));
  return {
    leg,
    hostSeconds: runs.map((run) => run.seconds),
    hostsVerified: 0,
    originBytes,
    ...(cpuCores === undefined ? {} : { cpuCores }),
    ...(machineCores === undefined ? {} : { machineCores }),
    ...(problems.length === 0 ? {} : { problem: problems.join('; ') }),
  };
}

async function naiveLeg(context: LegContext): Promise<LegMeasurement> {
  const { originUrl, model, setting } = context;
  const timeoutMs = Math.max(LEG_TIMEOUT_MIN_MS, LEG_TIMEOUT_FACTOR * naiveFluidSeconds(setting) * 1000);
  return measurePulls(
    context,
    'naive',
    (_host, _index, dir) => [
      NODE,
      CLI,
      'pull',
      originUrl,
      '--to',
      dir,
      '--manifest',
      model.manifestPath,
      '--json',
    ],
    timeoutMs,
  );
}

/** Why the swarm leg cannot run with this build, or undefined when its commands exist. */
function swarmCliProblem(): string | undefined {
  const help = (command: string): { ok: boolean; text: string } => {
    const result = spawnSync(NODE, [CLI, command, '--help'], { encoding: 'utf8', timeout: 30_000 });
    return { ok: result.status === 0, text: result.stdout };
  };
  const missing = ['scheduler', 'agent'].filter((command) => !help(command).ok);
  if (missing.length > 0) return `weightcast has no ${missing.join(' or ')} command yet`;
  if (!help('pull').text.includes('--agent')) return 'weightcast pull has no --agent option yet';
  return undefined;
}

/**
 * Asks every host's agent for the model through its local API, as a loader or an operator on
 * that host would (`POST /v1/local/models`), and times each host until its agent holds the whole
 * model verified (a status request that waits for completion): `bench/netns/join-client.ts`, one
 * small Node process per host, started and connected before the clock starts. (It used to be curl
 * started at the release: eight process starts at once in the first milliseconds of the leg, on the
 * same 2 cores as the eight agents joining.)
 */
function joinArgv(agentUrl: string, joinPath: string, hex: string): string[] {
  return [NODE, JOIN_CLIENT, agentUrl, joinPath, hex];
}

async function swarmLeg(context: LegContext): Promise<LegMeasurement[]> {
  const problem = swarmCliProblem();
  if (problem !== undefined) {
    log(`swarm: not run: ${problem}`);
    return [{ leg: 'swarm', hostSeconds: [], hostsVerified: 0, originBytes: undefined, skipped: problem }];
  }
  const { options, setting, work, model, originUrl } = context;
  const services: ChildProcess[] = [];
  try {
    const agentUrls = await startSwarmServices(context, services);
    const timeoutMs = Math.max(
      LEG_TIMEOUT_MIN_MS,
      LEG_TIMEOUT_FACTOR * 2 * lowerBoundSeconds(setting) * 1000,
    );
    if (options.warmUpMb > 0) {
      const warmUp = await prepareModel(work, options, true);
      const warmJoin = join(work, 'warm-up-join.json');
      await writeFile(
        warmJoin,
        JSON.stringify({
          source: `${originUrl}warm-up/`,
          manifest: readFileSync(warmUp.manifestPath, 'utf8'),
        }),
      );
      const warmHex = warmUp.digest.slice('sha256:'.length);
      log(`swarm: warming the agents up with a ${options.warmUpMb} MiB model (not measured)`);
      const runs = await runOnEveryHost(
        context.hostSet,
        (_host, index) => joinArgv(agentUrls[index] ?? '', warmJoin, warmHex),
        timeoutMs,
        { dir: context.logDir, name: 'warm-up' },
        { selfGated: true },
      );
      const failed = runs.filter((run) => run.problem !== undefined);
      if (failed.length > 0)
        throw new Error(`warm-up failed: ${failed.map((run) => run.problem).join('; ')}`);
    }
    const joinPath = join(work, 'join.json');
    await writeFile(
      joinPath,
      JSON.stringify({ source: originUrl, manifest: readFileSync(model.manifestPath, 'utf8') }),
    );
    const hex = model.digest.slice('sha256:'.length);
    const joined = await measureRuns(
      context,
      'swarm',
      (_host, index) => joinArgv(agentUrls[index] ?? '', joinPath, hex),
      timeoutMs,
      true,
    );
    if (options.skipCopyOut) {
      const caches = context.hostSet.hosts.map((host) => join(work, 'swarm-cache', host.label, hex, 'files'));
      log("swarm: verifying the agents' caches");
      return [{ ...joined, hostsVerified: await verifyCopies(context.hostSet, caches, model) }];
    }
    // Then every host copies the model out of its agent (`pull --agent`: a verified copy into its
    // own directory); the agents already hold it, so this times the copy alone.
    const pulls = await measurePulls(
      context,
      'swarm-copy',
      (_host, index, dir) => [
        NODE,
        CLI,
        'pull',
        originUrl,
        '--to',
        dir,
        '--manifest',
        model.manifestPath,
        '--agent',
        agentUrls[index] ?? '',
        '--json',
      ],
      timeoutMs,
    );
    const hostSeconds = joined.hostSeconds.map((seconds, index) => {
      const copy = pulls.hostSeconds[index];
      return seconds === undefined || copy === undefined ? undefined : seconds + copy;
    });
    return [
      // The agents' bytes are checked by the copies: each copy is verified against the manifest.
      { ...joined, hostsVerified: pulls.hostsVerified },
      {
        ...joined,
        leg: 'swarm + copy out',
        hostSeconds,
        hostsVerified: pulls.hostsVerified,
        ...(pulls.problem === undefined ? {} : { problem: pulls.problem }),
      },
    ];
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    log(`swarm: failed: ${message}`);
    return [{ leg: 'swarm', hostSeconds: [], hostsVerified: 0, originBytes: undefined, problem: message }];
  } finally {
    await Promise.all(services.map((child) => stopChild(child)));
    if (!options.keep) await rm(join(work, 'swarm-cache'), { recursive: true, force: true });
  }
}

/**
 * The scheduler in the control namespace (a machine of its own, off the origin's busy link) and
 * an agent in every host's, each awaited until it
 * listens; returns the agents' URLs in host order. Every process started is pushed on `services`
 * at once, so the caller stops it whatever happens here.
 */
async function startSwarmServices(context: LegContext, services: ChildProcess[]): Promise<string[]> {
  const { hostSet, options, work, logDir } = context;
  const loopback = hostSet.mode === 'loopback';
  const readers =
    options.originReaders ?? (typeof context.sim === 'string' ? undefined : context.sim.originReaders);
  const schedulerArgv = [
    NODE,
    ...profileFlags(),
    CLI,
    'scheduler',
    '--port',
    String(loopback ? await freePort() : SCHEDULER_PORT),
    '--host',
    hostSet.control.address,
    ...(readers === undefined ? [] : ['--origin-readers', String(readers)]),
    '--ring-parents',
    String(options.ringParents),
    ...schedulingFlags(options),
  ];
  const scheduler = spawnLogged(hostSet, hostSet.control.ns, schedulerArgv, logDir, 'scheduler');
  services.push(scheduler);
  const schedulerPattern = /weightcast scheduler listening on (http:\/\/\S+)/;
  const schedulerUrl = (await firstMatch(scheduler, schedulerPattern, START_TIMEOUT_MS, 'scheduler'))[1];
  if (schedulerUrl === undefined) throw new Error('scheduler printed no URL');

  const ports: number[] = [];
  while (ports.length < hostSet.hosts.length) ports.push(loopback ? await freePort() : AGENT_PORT);
  const listening = hostSet.hosts.map((host, index) => {
    // In namespaces tc caps the links; on loopback the agents must cap themselves.
    const caps = loopback ? ['--upload-mbps', String(host.mbps), '--download-mbps', String(host.mbps)] : [];
    const argv = [
      NODE,
      ...profileFlags(),
      CLI,
      'agent',
      '--scheduler',
      schedulerUrl,
      '--cache',
      join(work, 'swarm-cache', host.label),
      '--port',
      String(ports[index]),
      '--host',
      host.address,
      ...caps,
    ];
    const agent = spawnLogged(hostSet, host.ns, argv, logDir, `agent-${host.label}`);
    services.push(agent);
    const pattern = /weightcast agent listening on (http:\/\/\S+)/;
    return firstMatch(agent, pattern, START_TIMEOUT_MS, `agent on ${host.label}`);
  });
  return (await Promise.all(listening)).map((match) => match[1] ?? '');
}

/**
 * Diagnostics for the agents and the scheduler: WEIGHTCAST_PROFILE_DIR has each write a CPU profile
 * (node --cpu-prof) there; WEIGHTCAST_AGENT_NODE_FLAGS adds node flags (for example --perf-basic-prof for `perf`).
 */
function profileFlags(): string[] {
  const dir = process.env['WEIGHTCAST_PROFILE_DIR'];
  const extra = (process.env['WEIGHTCAST_AGENT_NODE_FLAGS'] ?? '').split(' ').filter((flag) => flag !== '');
  return [...(dir === undefined || dir === '' ? [] : ['--cpu-prof', `--cpu-prof-dir=${dir}`]), ...extra];
}

/** A port that was free a moment ago on 127.0.0.1 (loopback mode, where every service shares one address). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port from listen(0)');
  return address.port;
}

interface Report {
  mode: 'netns' | 'loopback';
  modeNote: string;
  /** The machine's 1-minute load average when the benchmark started. */
  loadAverageAtStart: number;
  setting: Setting & { pieceMb: number; pieces: number; digest: string };
  tLowerBoundSeconds: number;
  naiveFluidSeconds: number;
  sim: SimPrediction | string;
  /** The share of each cap the simulator's links were given (TCP payload on the testbed). */
  simLinkShare: number;
  /** The testbed links' MTU (netns mode). */
  mtu: number;
  legs: LegSummary[];
}

function printReport(report: Report): void {
  const { setting, sim } = report;
  const where = report.mode === 'netns' ? `${report.mode}` : 'loopback';
  const header = [
    'leg',
    'verified',
    'T_last',
    'p50',
    'efficiency',
    'origin / S',
    'predicted T_last',
    'measured / predicted',
    'cores busy: ours / all',
  ];
  const rows = report.legs.map((leg) => {
    const predicted =
      leg.leg === 'naive'
        ? { seconds: report.naiveFluidSeconds, source: 'fluid N*S/U' }
        : typeof sim === 'string'
          ? undefined
          : { seconds: sim.tLastSeconds, source: 'sim' };
    const ratio =
      predicted === undefined || leg.tLastSeconds === undefined
        ? undefined
        : leg.tLastSeconds / predicted.seconds;
    return [
      `${leg.leg} (${where})`,
      leg.skipped !== undefined ? 'not run' : `${leg.hostsVerified}/${leg.hosts}`,
      formatOptionalSeconds(leg.tLastSeconds),
      formatOptionalSeconds(leg.p50Seconds),
      formatOptionalNumber(leg.efficiency, 3),
      formatOptionalNumber(leg.originRatio, 3),
      predicted === undefined ? '-' : `${formatOptionalSeconds(predicted.seconds)} (${predicted.source})`,
      formatOptionalNumber(ratio, 3),
      `${formatOptionalNumber(leg.cpuCores, 2)} / ${formatOptionalNumber(leg.machineCores, 2)} of ${cpus().length}`,
    ];
  });
  if (typeof sim !== 'string') {
    rows.push([
      sim.incomplete ? 'swarm (sim, INCOMPLETE)' : 'swarm (sim)',
      '-',
      formatOptionalSeconds(sim.tLastSeconds),
      formatOptionalSeconds(sim.p50Seconds),
      // Against the same bound as the measured rows (the caps), not the simulator's own.
      formatOptionalNumber(report.tLowerBoundSeconds / sim.tLastSeconds, 3),
      sim.originRatio.toFixed(3),
      '',
      '',
      '',
    ]);
  }
  console.log(
    `fan-out of a ${formatBytes(setting.totalBytes)} model (${setting.pieces} pieces of ${formatBytes(setting.pieceMb * MiB)}, ` +
      `${setting.digest.slice(0, 19)}…) to ${setting.hosts} hosts; hosts ${setting.hostMbps} Mbit/s up and down, ` +
      `origin ${setting.originMbps} Mbit/s`,
  );
  console.log(report.modeNote);
  const load = report.loadAverageAtStart;
  const busy = load > 0.5 * cpus().length;
  console.log(
    `load average at start ${load.toFixed(2)} on ${cpus().length} cores` +
      (busy ? ': the machine was busy, so these times measure the contention as well' : ''),
  );
  console.log(`T_lb = max(S/U, S/B, N*S/(U + N*B)) = ${formatOptionalSeconds(report.tLowerBoundSeconds)}\n`);
  for (const line of renderTable(header, rows)) console.log(line);
  console.log('');
  for (const leg of report.legs) {
    if (leg.skipped !== undefined) console.log(`${leg.leg}: not run: ${leg.skipped}`);
    if (leg.problem !== undefined) console.log(`${leg.leg}: FAILED: ${leg.problem}`);
  }
  if (typeof sim === 'string') console.log(`sim: ${sim}`);
  const swarm = report.legs.find((leg) => leg.leg === 'swarm');
  if (swarm?.tLastSeconds !== undefined && typeof sim !== 'string') {
    const error = relativeError(swarm.tLastSeconds, sim.tLastSeconds);
    const met = Math.abs(error) <= 0.15;
    console.log(
      `swarm T_last vs sim: ${error >= 0 ? '+' : ''}${(error * 100).toFixed(1)} % (goal: within 15 %): ${met ? 'met' : 'NOT met'}`,
    );
  }
  if (swarm !== undefined) {
    console.log(
      "swarm: from asking every host's agent for the model (local API, all at once) until each agent holds it verified " +
        '(what a loader on that host reads from); swarm + copy out: plus the time `pull --agent`, run on every host ' +
        'afterwards, takes to copy it into its own directory, verified again and fsynced.',
    );
  }
  if (report.mode === 'netns') {
    console.log(
      `tc counts packet headers: TCP payload tops out near ${tcpPayloadShare(report.mtu).toFixed(3)} x each cap at MTU ${report.mtu}, ` +
        'so the simulator is run with the links at that share of their caps (its prediction moves the same payload ' +
        'over the same effective links); every efficiency is against T_lb at the full caps.',
    );
    console.log(
      "origin / S: bytes sent by the origin namespace's eth0 during the leg (TX counter before and after), " +
        'over S; it includes protocol headers (the scheduler runs on a control machine of its own).',
    );
  } else {
    console.log(
      'origin / S on loopback: bytes the origin-side processes wrote (/proc/PID/io wchar), over S; ' +
        'hosts are capped only by their own processes.',
    );
  }
  console.log(
    'cores busy: ours = CPU seconds of the processes this benchmark started (origin, scheduler, agents, ' +
      "pulls, itself) over the pulls' wall time, both from the release of the starting gate (the hosts' " +
      'commands start up before it); all = the whole machine (/proc/stat: other work and steal ' +
      `included). Near ${cpus().length} the cores, not the links, set the pace; all well above ours means ` +
      'something else competed for them.',
  );
}

async function main(argv: readonly string[]): Promise<number> {
  let options: Options;
  try {
    const parsed = parseOptions(argv);
    if (parsed === 'help') {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    options = parsed;
  } catch (error) {
    log(`bench:fanout: ${error instanceof Error ? error.message : String(error)}\n${USAGE}`);
    return 2;
  }
  const problem = options.loopback ? 'forced by --loopback' : await netnsProblem();
  const modeNote =
    problem === undefined
      ? `testbed: a network namespace per host (and one for the scheduler) on a Linux bridge, tc tbf caps on every link, both directions, MTU ${options.mtu}`
      : `LOOPBACK MODE: no network namespaces (${problem}); everything runs on 127.0.0.1, capped only by the processes themselves`;
  if (problem !== undefined) log(`NOTE: ${modeNote}`);
  const loadAverageAtStart = loadavg()[0] ?? 0;

  await mkdir(options.work, { recursive: true });
  const work = await mkdtemp(join(options.work, 'weightcast-fanout-'));
  const root = new ChildRegistry();
  let hostSet: HostSet | undefined;
  const disposeAbruptEnd = onAbruptEnd((reason) => {
    hostSet?.closeSync();
    root.killAllSync();
    if (!options.keep) rmSync(work, { recursive: true, force: true, maxRetries: 3 });
    log(
      `bench:fanout: ${reason}: stopped its processes, removed its testbed${options.keep ? '' : ` and ${work}`}`,
    );
  });
  try {
    const model = await prepareModel(work, options);
    const setting: Setting = {
      hosts: options.hosts,
      totalBytes: model.totalBytes,
      hostMbps: options.mbps,
      originMbps: options.originMbps,
    };
    // Loopback agents cap their payload themselves; on the testbed tc's caps include headers.
    const simLinkShare = problem === undefined ? tcpPayloadShare(options.mtu) : 1;
    const sim = await predict(setting, model.pieceBytes, options, root, simLinkShare);
    hostSet =
      problem === undefined
        ? await createTestbed({
            hosts: options.hosts,
            hostMbps: options.mbps,
            originMbps: options.originMbps,
            mtu: options.mtu,
          })
        : new LoopbackHosts(options.hosts, options.mbps, options.originMbps);
    const measurements: LegMeasurement[] = [];
    try {
      const logDir = join(work, 'logs');
      await mkdir(logDir, { recursive: true });
      const originUrl = await startOrigin(hostSet, model, logDir);
      log(`origin serving ${model.dir} at ${originUrl}; process output goes to ${logDir} (--keep keeps it)`);
      const context: LegContext = { hostSet, model, originUrl, setting, work, logDir, options, sim };
      if (options.legs.includes('naive')) measurements.push(await naiveLeg(context));
      if (options.legs.includes('swarm')) measurements.push(...(await swarmLeg(context)));
      if (options.keep && process.env['WEIGHTCAST_TRACE_PIECES'] === '1') {
        log(`where the swarm's time went: node dist/bench/trace-report.js ${logDir}`);
      }
    } finally {
      await hostSet.close();
    }
    const report: Report = {
      mode: hostSet.mode,
      modeNote,
      loadAverageAtStart,
      setting: { ...setting, pieceMb: model.pieceBytes / MiB, pieces: model.pieces, digest: model.digest },
      tLowerBoundSeconds: lowerBoundSeconds(setting),
      naiveFluidSeconds: naiveFluidSeconds(setting),
      sim,
      simLinkShare,
      mtu: options.mtu,
      legs: measurements.map((measurement) => summarizeLeg(measurement, setting)),
    };
    if (options.json) console.log(JSON.stringify({ event: 'fanout', ...report }));
    else printReport(report);
    return report.legs.some(legFailed) ? 1 : 0;
  } finally {
    disposeAbruptEnd();
    await root.stopAll();
    if (options.keep) log(`kept ${work}`);
    else await rm(work, { recursive: true, force: true });
  }
}

process.exitCode = await main(process.argv.slice(2));
