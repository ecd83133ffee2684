/**
 * `npm run bench:fanout`: one model to N hosts, several ways, on the same testbed, measured the way
 * a user meets it. Legs (`--legs`, in this order):
 *
 * The origin is an HTTP server on the origin's host (`--origin-server`): nginx where it is installed
 * (Debian's nginx-light; what the issue's measurements and most users' origins run), else weightcast's
 * own file server, which is also the one used on loopback (only it can cap its own rate there).
 *
 * - naive: every host runs `weightcast pull URL` against the origin at once.
 * - swarm (the user's flow, cold): the scheduler runs beside the origin (`--scheduler-on`); at the
 *   clock's start every host starts `weightcast agent` (a fresh process, as systemd would) and, once
 *   that agent prints its listening line, `weightcast pull URL --manifest M --to DIR --agent URL`
 *   (also fresh). A host is done when its pull exits 0: the files are at the destination.
 * - swarm-warm (`--warm`): the older measurement. Agents started and warmed up on a small model
 *   before the clock, asked for the model through their local API at once, then `pull --agent`
 *   copies it out; two rows (the agents hold it; plus the copy).
 * - bittorrent: aria2c + opentracker + mktorrent (Debian's), a private torrent seeded from the
 *   origin's host; every host's aria2c starts at the clock and seeds on until all are done.
 * - chain: a fixed pipelined socat + tee relay origin -> host1 -> ... -> hostN, the ceiling.
 *
 * Every host's copy is verified against the manifest after its leg, outside the timing. Each leg
 * prints T_last (until the last host finished), p50, efficiency against the fluid bound, origin
 * bytes per model copy, user and kernel CPU-seconds per GiB delivered (the leg's cgroup: all its
 * processes, origin included), and the simulator's prediction for the swarm rows.
 *
 * The testbed is a namespace per host on a Linux bridge with tc caps on every link, MTU 1500 unless
 * `--mtu` (`netns/`). Without root or `ip netns` (or with --loopback) it says so and runs on
 * 127.0.0.1, where the only caps are the processes' own (the agents' --upload-mbps/--download-mbps
 * and the origin server's --rate-mbps when it has one) and the baseline legs do not run.
 *
 * Diagnostics: with WEIGHTCAST_TRACE_PIECES=1 and --keep, the agents trace every piece and
 * `bench/trace-report.ts` reads the kept logs (transfers in flight per host and parent, timeline,
 * and each host's start-up after the clock).
 *
 * Flags: see USAGE in `netns/options.ts`.
 */

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildManifest } from '../src/manifest/build.js';
import { manifestDigest, totalBytes, totalPieces, writeManifest } from '../src/manifest/manifest.js';
import { LocalOrigin } from '../src/origin/local.js';
import { PieceMap } from '../src/piece/piece-map.js';
import {
  TRANSFER_UNIT_BYTES_DEFAULT,
  TransferUnits,
  unitPiecesFor,
} from '../src/swarm/scheduler/transfer-units.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { formatBytes } from '../src/util/units.js';
import { bittorrentLeg, chainLeg, nodeChainLeg, storeRingLeg } from './netns/baseline-legs.js';
import { cgroupProblem, CgroupTree } from './netns/cgroup.js';
import { ChildRegistry, firstMatch, onAbruptEnd, stopChild, tailOf, waitForExit } from './netns/children.js';
import {
  NGINX_PORT,
  nginxArgv,
  nginxOriginConfig,
  userPullArgv,
  weightcastCommand,
} from './netns/commands.js';
import {
  allReady,
  failedRuns,
  hostFinish,
  LEG_TIMEOUT_FACTOR,
  LEG_TIMEOUT_MIN_MS,
  LegMeter,
  log,
  release,
  RttSampler,
  missingTools,
  runOnEveryHost,
  spawnLogged,
  START_TIMEOUT_MS,
  startService,
  stopAll,
  waitListening,
  verifyCopies,
  verifyAndMeasure,
  type HostRun,
  type LegContext,
  type Model,
} from './netns/leg-runtime.js';
import {
  optionsOrExitCode,
  originReadersFlags,
  originServerLabel,
  parseOptions,
  resolveOriginServer,
  type OriginServerKind,
  schedulingFlags,
  transferUnitFlags,
  UsageError,
  USAGE,
  type Options,
} from './netns/options.js';
import { tcpPayloadShare, testbedTag } from './netns/plan.js';
import { CLOCK_FILE } from './trace-report.js';
import {
  chainFluidSeconds,
  legLabel,
  roundsComparisonLines,
  cpuByRoleLine,
  formatOptionalNumber,
  formatOptionalSeconds,
  legFailed,
  lowerBoundSeconds,
  naiveFluidSeconds,
  renderTable,
  rttSummary,
  summarizeLeg,
  userFlowPhasesLine,
  type LegMeasurement,
  type LegSummary,
  type Setting,
  type UserFlowPhases,
} from './netns/report.js';
import { createTestbed, LoopbackHosts, netnsProblem, servicePort, type HostSet } from './netns/testbed.js';
import { ensureClusterTokens } from './netns/cluster-tokens.js';
import { applyNodeExtraCa } from './netns/node-start.js';

const MiB = 1024 * 1024;
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'bin', 'weightcast.js');
/** The `weightcast` command as users start it: every process whose time and CPU a leg counts. */
const WEIGHTCAST = join(ROOT, 'bin', 'weightcast');
const JOIN_CLIENT = fileURLToPath(new URL('./netns/join-client.js', import.meta.url));
const FILE_SERVER = join(ROOT, 'dist', 'src', 'origin', 'file-server-main.js');
const NODE = process.execPath;

const SIM_TIMEOUT_MS = 300_000;
/** How long to wait after a child's exit for the rest of its output. */
const PIPE_DRAIN_MS = 5000;
/** The swarm services' ports inside the namespaces (each host has its own address). */
const SCHEDULER_PORT = 7000;
/** The agent's default port, as a user would run it. */
const AGENT_PORT = 7100;

/**
 * The model under test in `<work>/origin/model`, which the origin serves as `<url>model/`; for
 * swarm-warm, a small second model in `<work>/origin/warm-up/` that the agents fetch before the
 * measured run (agents are long-running daemons there, and a fresh Node process spends its first
 * seconds compiling its hot paths).
 */
async function prepareModel(work: string, options: Options, warmUp = false): Promise<Model> {
  const originRoot = join(work, 'origin');
  const dir = join(originRoot, warmUp ? 'warm-up' : 'model');
  const sizeMb = warmUp ? options.warmUpMb : options.sizeMb;
  log(`synthesising a ${sizeMb} MiB Llama-style checkpoint in ${dir}${warmUp ? ' (warm-up)' : ''}`);
  await synthesizeModel({ dir, arch: 'llama', dtype: 'bf16', sizeBytes: sizeMb * MiB, seed: warmUp ? 2 : 1 });
  const local = new LocalOrigin(dir);
  const pieceSize = options.pieceMb === undefined ? {} : { pieceSize: options.pieceMb * MiB };
  const manifest = await buildManifest(local, pieceSize).finally(() => local.close());
  const manifestPath = join(work, warmUp ? 'warm-up-manifest.json' : 'manifest.json');
  await writeManifest(manifestPath, manifest);
  const map = new PieceMap(manifest);
  const units = new TransferUnits(
    map,
    options.transferUnit ?? unitPiecesFor(map.pieceSize, map.pieceCount, TRANSFER_UNIT_BYTES_DEFAULT),
  );
  return {
    dir,
    originRoot,
    manifestPath,
    totalBytes: totalBytes(manifest),
    pieceBytes: manifest.pieceSize,
    pieces: totalPieces(manifest),
    unitPieces: units.unitPieces,
    units: units.count,
    unitBytes: units.unitBytes,
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
    ...originReadersFlags(options),
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

/** The origin's HTTP server over `<work>/origin`, in the services cgroup; its URL and PID. */
async function startOrigin(
  context: Pick<LegContext, 'hostSet' | 'logDir' | 'services' | 'model' | 'work'>,
  server: OriginServerKind,
): Promise<{ url: string; pid: number | undefined }> {
  const { hostSet } = context;
  const label = `origin ${originServerLabel(server)}`;
  /** Spawned behind the gate, moved into the services cgroup, then released. */
  const start = async (argv: readonly string[], mergeStderr: boolean): Promise<ChildProcess> => {
    const child = spawnLogged(context, hostSet.origin.ns, argv, 'origin', { gate: true, mergeStderr });
    await allReady([child], [label]);
    await context.services?.adoptChildren([child]);
    release(child);
    return child;
  };
  if (server === 'nginx') {
    const dir = join(context.work, 'nginx');
    await mkdir(join(dir, 'temp'), { recursive: true });
    const configPath = join(dir, 'nginx.conf');
    const { address } = hostSet.origin;
    await writeFile(
      configPath,
      nginxOriginConfig({ address, port: NGINX_PORT, root: context.model.originRoot, dir }),
    );
    const child = await start(nginxArgv(configPath, dir), true);
    await waitListening(hostSet, hostSet.origin, NGINX_PORT, label);
    return { url: `http://${address}:${NGINX_PORT}/`, pid: child.pid };
  }
  const capped = hostSet.mode === 'loopback' && fileServerHasRateCap();
  if (hostSet.mode === 'loopback' && !capped) {
    log('NOTE: the origin file server has no --rate-mbps yet: on loopback the origin is not capped');
  }
  const argv = [
    NODE,
    FILE_SERVER,
    '--root',
    context.model.originRoot,
    '--host',
    hostSet.origin.address,
    '--port',
    '0',
    ...(capped ? ['--rate-mbps', String(hostSet.origin.mbps)] : []),
  ];
  const child = await start(argv, false);
  const line = await firstMatch(child, /^\{.*"url".*\}$/, START_TIMEOUT_MS, label);
  return { url: (JSON.parse(line[0]) as { url: string }).url, pid: child.pid };
}

function swarmTimeoutMs(setting: Setting): number {
  return Math.max(LEG_TIMEOUT_MIN_MS, LEG_TIMEOUT_FACTOR * 2 * lowerBoundSeconds(setting) * 1000);
}

async function naiveLeg(context: LegContext): Promise<LegMeasurement> {
  const leg = 'naive';
  const { modelUrl, model, setting, work, hostSet } = context;
  const timeoutMs = Math.max(LEG_TIMEOUT_MIN_MS, LEG_TIMEOUT_FACTOR * naiveFluidSeconds(setting) * 1000);
  const dirs = hostSet.hosts.map((host) => join(work, leg, host.label));
  const meter = await LegMeter.open(context, leg);
  let runs: HostRun[];
  try {
    log(`${leg}: ${hostSet.hosts.length} hosts at once (timeout ${Math.round(timeoutMs / 1000)} s)`);
    runs = await runOnEveryHost(
      context,
      meter,
      (_host, index) => [
        WEIGHTCAST,
        'pull',
        modelUrl,
        '--to',
        dirs[index] ?? '',
        '--manifest',
        model.manifestPath,
        '--json',
      ],
      timeoutMs,
      leg,
      { role: 'pulls' },
    );
  } finally {
    await meter.close();
  }
  return verifyAndMeasure(context, meter, leg, runs, dirs, join(work, leg));
}

/** Why the swarm legs cannot run with this build, or undefined when their commands exist. */
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
 * The scheduler, in the origin's namespace (`--scheduler-on origin`, the default: it often runs
 * beside the origin and shares its busy link) or the control machine's; its URL once it listens.
 * Started before the clock, as the long-running service it is, in the leg's cgroup.
 */
async function startScheduler(
  context: LegContext,
  meter: LegMeter,
  services: ChildProcess[],
): Promise<string> {
  const { hostSet, options } = context;
  const place = options.schedulerOn === 'origin' ? hostSet.origin : hostSet.control;
  const argv = [
    ...weightcastCommand(WEIGHTCAST, profileFlags()),
    'scheduler',
    '--port',
    String(await servicePort(hostSet, SCHEDULER_PORT)),
    '--host',
    place.address,
    ...originReadersFlags(options),
    '--ring-parents',
    String(options.ringParents),
    ...schedulingFlags(options),
    ...transferUnitFlags(options),
  ];
  const scheduler = await startService(context, meter, services, place.ns, argv, 'scheduler', {
    role: 'scheduler',
  });
  const pattern = /weightcast scheduler listening on (http:\/\/\S+)/;
  const url = (await firstMatch(scheduler, pattern, START_TIMEOUT_MS, 'scheduler'))[1];
  if (url === undefined) throw new Error('scheduler printed no URL');
  return url;
}

/** Each host's agent port: the default in the namespaces, free ones on loopback (one shared address). */
async function agentPorts(hostSet: HostSet): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < hostSet.hosts.length) ports.push(await servicePort(hostSet, AGENT_PORT));
  return ports;
}

function agentArgv(
  context: LegContext,
  schedulerUrl: string,
  index: number,
  port: number,
  cache: string,
): string[] {
  const host = context.hostSet.hosts[index];
  if (host === undefined) throw new Error(`no host ${index}`);
  // In namespaces tc caps the links; on loopback the agents must cap themselves.
  const caps =
    context.hostSet.mode === 'loopback'
      ? ['--upload-mbps', String(host.mbps), '--download-mbps', String(host.mbps)]
      : [];
  return [
    ...weightcastCommand(WEIGHTCAST, profileFlags()),
    'agent',
    '--scheduler',
    schedulerUrl,
    '--cache',
    cache,
    '--port',
    String(port),
    '--host',
    host.address,
    // The pulls' destinations are under the work directory: the agents write the model there.
    '--destination-root',
    context.work,
    ...caps,
  ];
}

const AGENT_LISTENING = /weightcast agent listening on (http:\/\/\S+)/;
/** The swarm leg's start-up table: role CPU read this often from the clock, for this long. */
const START_SAMPLE_MS = 250;
const START_SAMPLED_MS = 2000;

/** `pull --agent --json`'s line once the agent holds the model. */
const AGENT_COMPLETE = /"event":"agent-complete","seconds":([\d.eE+-]+)/;

/**
 * The user's flow with cold agents: at the clock's start each host starts its agent; when the agent
 * says it listens, the host's pull starts (both fresh processes, held at a gate until then, so the
 * benchmark's own spawning is not counted but all of their start-up is). With `--pull-start launch`
 * the pull starts at the clock too, as `weightcast agent & weightcast pull ...` would, and waits for
 * its agent. A host is done when its pull exits 0.
 */
async function swarmLeg(context: LegContext): Promise<LegMeasurement> {
  const leg = 'swarm';
  const problem = swarmCliProblem();
  if (problem !== undefined) return skippedLeg(leg, problem);
  const { hostSet, work, model, modelUrl, setting } = context;
  const dirs = hostSet.hosts.map((host) => join(work, leg, host.label));
  const meter = await LegMeter.open(context, leg);
  const services: ChildProcess[] = [];
  let runs: HostRun[] = [];
  const phases: UserFlowPhases[] = [];
  const sampler = schedulerRttSampler(context);
  let rtts: number[] = [];
  const pullsAtLaunch = context.options.pullStart === 'launch';
  let diskNote: string | undefined;
  try {
    const schedulerUrl = await startScheduler(context, meter, services);
    const ports = await agentPorts(hostSet);
    const agents = hostSet.hosts.map((host, index) =>
      spawnLogged(
        context,
        host.ns,
        agentArgv(context, schedulerUrl, index, ports[index] ?? 0, join(work, `${leg}-cache`, host.label)),
        `agent-${host.label}`,
        { gate: true },
      ),
    );
    services.push(...agents);
    const pulls = hostSet.hosts.map((host, index) =>
      spawnLogged(
        context,
        host.ns,
        userPullArgv({
          weightcast: weightcastCommand(WEIGHTCAST),
          source: modelUrl,
          manifestPath: model.manifestPath,
          dir: dirs[index] ?? '',
          agentUrl: `http://${host.address}:${ports[index] ?? 0}`,
        }),
        `pull-${host.label}`,
        { gate: true },
      ),
    );
    services.push(...pulls);
    await allReady(
      [...agents, ...pulls],
      [
        ...hostSet.hosts.map((host) => `agent on ${host.label}`),
        ...hostSet.hosts.map((host) => `pull on ${host.label}`),
      ],
    );
    await meter.adopt(agents, 'agents');
    await meter.adopt(pulls, 'pulls');
    const timeoutMs = swarmTimeoutMs(setting);
    log(
      `${leg}: ${hostSet.hosts.length} hosts start agent, ${pullsAtLaunch ? 'and pull with it' : 'then pull'} ` +
        `(timeout ${Math.round(timeoutMs / 1000)} s)`,
    );
    const started = await meter.start();
    meter.sampleStart(START_SAMPLE_MS, START_SAMPLED_MS);
    sampler.start();
    for (const agent of agents) release(agent);
    // For trace-report's start-up table: the clock's start on the agents' wall clock.
    if (process.env['WEIGHTCAST_TRACE_PIECES'] === '1')
      await writeFile(
        join(context.logDir, CLOCK_FILE),
        JSON.stringify({ startedAt: performance.timeOrigin + started }),
      );
    if (pullsAtLaunch) for (const pull of pulls) release(pull);
    const deadline = started + timeoutMs;
    runs = await Promise.all(
      hostSet.hosts.map(async (host, index): Promise<HostRun> => {
        const agent = agents[index];
        const pull = pulls[index];
        if (agent === undefined || pull === undefined) return { seconds: undefined, problem: 'no process' };
        try {
          await firstMatch(
            agent,
            AGENT_LISTENING,
            Math.max(0, deadline - performance.now()),
            `agent on ${host.label}`,
          );
        } catch (error) {
          return { seconds: undefined, problem: error instanceof Error ? error.message : String(error) };
        }
        const agentStartSeconds = (performance.now() - started) / 1000;
        if (!pullsAtLaunch) release(pull);
        // The pull reports when its agent holds the model (seconds since the pull began), then copies out.
        const agentComplete = firstMatch(
          pull,
          AGENT_COMPLETE,
          Math.max(0, deadline - performance.now()),
          'pull',
        )
          .then((match) => Number(match[1]))
          .catch(() => undefined);
        const run = await hostFinish(pull, { exit: true }, started, deadline, host.label);
        phases.push({
          agentStartSeconds,
          pullStartSeconds: pullsAtLaunch ? 0 : agentStartSeconds,
          swarmSeconds: await agentComplete,
          totalSeconds: run.seconds,
        });
        return run;
      }),
    );
    await meter.stop();
    const startLines = meter.startLines();
    if (startLines.length > 0)
      log(
        `${leg}: CPU in the first ${START_SAMPLED_MS / 1000} s by role (each role's cgroup, every ${START_SAMPLE_MS / 1000} s from the clock; ` +
          `cores busy: the whole machine's):\n${startLines.join('\n')}`,
      );
    rtts = await sampler.stop();
    diskNote = agentsDiskReadsLine(agents);
  } catch (error) {
    runs = failedRuns(leg, hostSet.hosts.length, error);
  } finally {
    await sampler.stop();
    await stopAll(services);
    await meter.close();
    if (!context.options.keep) await rm(join(work, `${leg}-cache`), { recursive: true, force: true });
  }
  const measurement = withRtts(
    await verifyAndMeasure(context, meter, leg, runs, dirs, join(work, leg)),
    rtts,
  );
  const note = userFlowPhasesLine(phases);
  log(`${leg}: ${note}`);
  return { ...measurement, notes: diskNote === undefined ? [note] : [note, diskNote] };
}

/**
 * What the agents read from the block device in their lives (`read_bytes` of /proc/PID/io: reads the
 * page cache served are not counted): pieces are written with O_DIRECT, so a piece served to a peer
 * from the store is a device read, and one served from the agent's recent pieces is none.
 */
function agentsDiskReadsLine(agents: readonly ChildProcess[]): string | undefined {
  let bytes = 0;
  for (const agent of agents) {
    if (agent.pid === undefined) return undefined;
    let text: string;
    try {
      text = readFileSync(`/proc/${agent.pid}/io`, 'utf8');
    } catch {
      return undefined;
    }
    const match = /^read_bytes: (\d+)$/m.exec(text);
    if (match === null) return undefined;
    bytes += Number(match[1]);
  }
  return (
    `the agents read ${formatBytes(bytes)} from disk (/proc/PID/io read_bytes; uploads to peers come ` +
    'from the runs each agent verified last, in memory, else from its files, written with O_DIRECT)'
  );
}

/** Samples the RTT of the scheduler's connections from its namespace (netns only). */
function schedulerRttSampler(context: LegContext): RttSampler {
  const { hostSet, options } = context;
  return new RttSampler(
    hostSet,
    options.schedulerOn === 'origin' ? hostSet.origin : hostSet.control,
    SCHEDULER_PORT,
  );
}

function withRtts(measurement: LegMeasurement, samplesMs: readonly number[]): LegMeasurement {
  const summary = rttSummary(samplesMs);
  return summary === undefined ? measurement : { ...measurement, schedulerRttMs: summary };
}

function skippedLeg(leg: string, why: string): LegMeasurement {
  log(`${leg}: not run: ${why}`);
  return { leg, hostSeconds: [], hostsVerified: 0, originBytes: undefined, skipped: why };
}

/**
 * Asks every host's agent for the model through its local API, as a loader or an operator on
 * that host would (`POST /v1/local/models`), and times each host until its agent holds the whole
 * model verified (a status request that waits for completion): `bench/netns/join-client.ts`, one
 * small Node process per host, started and connected before the clock starts.
 */
function joinArgv(agentUrl: string, joinPath: string, hex: string): string[] {
  return [NODE, JOIN_CLIENT, agentUrl, joinPath, hex];
}

/**
 * The older measurement: agents started and warmed up before the clock (long-running daemons),
 * asked for the model at once through their local API; then `pull --agent` copies it out on every
 * host. Two rows: `swarm-warm` (the agents hold it) and `swarm-warm + copy out`.
 */
async function swarmWarmLeg(context: LegContext): Promise<LegMeasurement[]> {
  const leg = 'swarm-warm';
  const problem = swarmCliProblem();
  if (problem !== undefined) return [skippedLeg(leg, problem)];
  const { options, setting, work, model, modelUrl, hostSet } = context;
  const services: ChildProcess[] = [];
  const meter = await LegMeter.open(context, leg);
  let copyMeter: LegMeter | undefined;
  const sampler = schedulerRttSampler(context);
  try {
    const schedulerUrl = await startScheduler(context, meter, services);
    const ports = await agentPorts(hostSet);
    const agents = await Promise.all(
      hostSet.hosts.map((host, index) =>
        startService(
          context,
          meter,
          services,
          host.ns,
          agentArgv(context, schedulerUrl, index, ports[index] ?? 0, join(work, `${leg}-cache`, host.label)),
          `agent-${host.label}`,
          { role: 'agents' },
        ),
      ),
    );
    const agentUrls = (
      await Promise.all(
        agents.map((agent, index) =>
          firstMatch(
            agent,
            AGENT_LISTENING,
            START_TIMEOUT_MS,
            `agent on ${hostSet.hosts[index]?.label ?? index}`,
          ),
        ),
      )
    ).map((match) => match[1] ?? '');
    const timeoutMs = swarmTimeoutMs(setting);
    if (options.warmUpMb > 0) await warmUp(context, agentUrls, timeoutMs);
    const joinPath = join(work, 'join.json');
    await writeFile(
      joinPath,
      JSON.stringify({ source: modelUrl, manifest: readFileSync(model.manifestPath, 'utf8') }),
    );
    const hex = model.digest.slice('sha256:'.length);
    log(`${leg}: ${hostSet.hosts.length} agents asked at once (timeout ${Math.round(timeoutMs / 1000)} s)`);
    sampler.start();
    const joined = await runOnEveryHost(
      context,
      meter,
      (_host, index) => joinArgv(agentUrls[index] ?? '', joinPath, hex),
      timeoutMs,
      leg,
      { selfGated: true, role: 'joins' },
    );
    const rtts = await sampler.stop();
    for (const run of joined) if (run.problem !== undefined) log(`  ${run.problem}`);
    if (options.skipCopyOut) {
      const caches = hostSet.hosts.map((host) => join(work, `${leg}-cache`, host.label, hex, 'files'));
      log("swarm-warm: verifying the agents' caches");
      return [withRtts(meter.measurement(leg, joined, await verifyCopies(context, caches)), rtts)];
    }
    // Then every host copies the model out of its agent (`pull --agent`: a verified copy into its
    // own directory); the agents already hold it, so this times the copy alone.
    copyMeter = await LegMeter.open(context, `${leg}-copy`);
    await copyMeter.adopt(services.slice(0, 1), 'scheduler');
    await copyMeter.adopt(services.slice(1), 'agents');
    const dirs = hostSet.hosts.map((host) => join(work, `${leg}-copy`, host.label));
    const copies = await runOnEveryHost(
      context,
      copyMeter,
      (_host, index) => [
        WEIGHTCAST,
        'pull',
        modelUrl,
        '--to',
        dirs[index] ?? '',
        '--manifest',
        model.manifestPath,
        '--agent',
        agentUrls[index] ?? '',
        '--json',
      ],
      timeoutMs,
      `${leg}-copy`,
      { role: 'pulls' },
    );
    const copyMeasurement = await verifyAndMeasure(
      context,
      copyMeter,
      `${leg}-copy`,
      copies,
      dirs,
      join(work, `${leg}-copy`),
    );
    const first = withRtts(meter.measurement(leg, joined, copyMeasurement.hostsVerified), rtts);
    return [first, combine(`${leg} + copy out`, first, copyMeasurement)];
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    log(`${leg}: failed: ${message}`);
    return [{ leg, hostSeconds: [], hostsVerified: 0, originBytes: undefined, problem: message }];
  } finally {
    await sampler.stop();
    await stopAll(services);
    await copyMeter?.close();
    await meter.close();
    if (!options.keep) await rm(join(work, `${leg}-cache`), { recursive: true, force: true });
  }
}

/** Two phases one after the other on every host: times, CPU and bytes add up. */
function combine(leg: string, first: LegMeasurement, second: LegMeasurement): LegMeasurement {
  const add = (a: number | undefined, b: number | undefined): number | undefined =>
    a === undefined || b === undefined ? undefined : a + b;
  const cpu =
    first.cpu === undefined || second.cpu === undefined
      ? undefined
      : {
          userSeconds: first.cpu.userSeconds + second.cpu.userSeconds,
          systemSeconds: first.cpu.systemSeconds + second.cpu.systemSeconds,
        };
  const wallSeconds = add(first.wallSeconds, second.wallSeconds);
  const problem = [first.problem, second.problem].filter((text) => text !== undefined).join('; ');
  return {
    leg,
    hostSeconds: first.hostSeconds.map((seconds, index) => add(seconds, second.hostSeconds[index])),
    hostsVerified: second.hostsVerified,
    originBytes: add(first.originBytes, second.originBytes),
    ...(cpu === undefined ? {} : { cpu, cpuSource: first.cpuSource ?? 'proc' }),
    ...(wallSeconds === undefined ? {} : { wallSeconds }),
    ...(problem === '' ? {} : { problem }),
  };
}

/** swarm-warm: every agent fetches a small model first, unmeasured. */
async function warmUp(context: LegContext, agentUrls: readonly string[], timeoutMs: number): Promise<void> {
  const { work, options, originUrl } = context;
  const model = await prepareModel(work, options, true);
  const joinPath = join(work, 'warm-up-join.json');
  await writeFile(
    joinPath,
    JSON.stringify({ source: `${originUrl}warm-up/`, manifest: readFileSync(model.manifestPath, 'utf8') }),
  );
  const hex = model.digest.slice('sha256:'.length);
  log(`swarm-warm: warming the agents up with a ${options.warmUpMb} MiB model (not measured)`);
  const meter = await LegMeter.open({ ...context, cgroups: undefined }, 'warm-up');
  const runs = await runOnEveryHost(
    context,
    meter,
    (_host, index) => joinArgv(agentUrls[index] ?? '', joinPath, hex),
    timeoutMs,
    'warm-up',
    { selfGated: true },
  );
  const failed = runs.filter((run) => run.problem !== undefined);
  if (failed.length > 0) throw new Error(`warm-up failed: ${failed.map((run) => run.problem).join('; ')}`);
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

interface Report {
  mode: 'netns' | 'loopback';
  modeNote: string;
  /** The machine's 1-minute load average when the benchmark started. */
  loadAverageAtStart: number;
  /** Where NODE_EXTRA_CA_CERTS is set: what it costs each Node process, and whether the legs had it. */
  nodeStartNote?: string;
  setting: Setting & { pieceMb: number; pieces: number; unitPieces: number; units: number; digest: string };
  tLowerBoundSeconds: number;
  naiveFluidSeconds: number;
  chainFluidSeconds: number;
  sim: SimPrediction | string;
  /** The share of each cap the simulator's links were given (TCP payload on the testbed). */
  simLinkShare: number;
  /** The testbed links' MTU (netns mode). */
  mtu: number;
  schedulerOn: Options['schedulerOn'];
  /** The origin's HTTP server (`--origin-server`, resolved). */
  originServer: OriginServerKind;
  /** When the swarm leg's pulls started (`--pull-start`). */
  pullStart: Options['pullStart'];
  /** Why CPU is read from /proc instead of per-leg cgroups, when it is. */
  cgroupProblem: string | undefined;
  legs: LegSummary[];
}

function predictionFor(leg: string, report: Report): { seconds: number; source: string } | undefined {
  if (leg === 'naive') return { seconds: report.naiveFluidSeconds, source: 'fluid N*S/U' };
  if (leg === 'chain' || leg === 'node-chain' || leg === 'store-chain' || leg === 'store-ring')
    return { seconds: report.chainFluidSeconds, source: 'fluid S/B' };
  if (leg.startsWith('swarm') && typeof report.sim !== 'string')
    return { seconds: report.sim.tLastSeconds, source: 'sim' };
  return undefined;
}

function printReport(report: Report): void {
  const { setting, sim } = report;
  const header = [
    'leg',
    'verified',
    'T_last',
    'p50',
    'efficiency',
    'origin / S',
    'predicted T_last',
    'measured / predicted',
    'CPU-s/GiB user',
    'kernel',
    'cores: leg / machine',
  ];
  const rows = report.legs.map((leg) => {
    const predicted = predictionFor(leg.leg, report);
    const ratio =
      predicted === undefined || leg.tLastSeconds === undefined
        ? undefined
        : leg.tLastSeconds / predicted.seconds;
    return [
      legLabel(leg),
      leg.skipped !== undefined ? 'not run' : `${leg.hostsVerified}/${leg.hosts}`,
      formatOptionalSeconds(leg.tLastSeconds),
      formatOptionalSeconds(leg.p50Seconds),
      formatOptionalNumber(leg.efficiency, 3),
      formatOptionalNumber(leg.originRatio, 3),
      predicted === undefined ? '-' : `${formatOptionalSeconds(predicted.seconds)} (${predicted.source})`,
      formatOptionalNumber(ratio, 3),
      formatOptionalNumber(leg.userCpuPerGiB, 2),
      formatOptionalNumber(leg.kernelCpuPerGiB, 2),
      `${formatOptionalNumber(leg.cpuCores, 2)} / ${formatOptionalNumber(leg.machineCores, 2)}`,
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
      '',
      '',
    ]);
  }
  console.log(
    `fan-out of a ${formatBytes(setting.totalBytes)} model (${setting.pieces} pieces of ${formatBytes(setting.pieceMb * MiB)}` +
      (setting.unitPieces > 1
        ? `, moved ${setting.unitPieces} at a time in ${setting.units} transfer units`
        : '') +
      `, ` +
      `${setting.digest.slice(0, 19)}…) to ${setting.hosts} hosts; hosts ${setting.hostMbps} Mbit/s up and down, ` +
      `origin ${setting.originMbps} Mbit/s (${originServerLabel(report.originServer)}); scheduler on ${report.schedulerOn === 'origin' ? "the origin's host" : 'a control machine'}`,
  );
  console.log(report.modeNote);
  const load = report.loadAverageAtStart;
  const busy = load > 0.5 * cpus().length;
  console.log(
    `load average at start ${load.toFixed(2)} on ${cpus().length} cores` +
      (busy ? ': the machine was busy, so these times measure the contention as well' : ''),
  );
  if (report.nodeStartNote !== undefined) console.log(report.nodeStartNote);
  console.log(`T_lb = max(S/U, S/B, N*S/(U + N*B)) = ${formatOptionalSeconds(report.tLowerBoundSeconds)}\n`);
  for (const line of renderTable(header, rows)) console.log(line);
  console.log('');
  for (const leg of report.legs) {
    if (leg.skipped !== undefined) console.log(`${legLabel(leg)}: not run: ${leg.skipped}`);
    if (leg.problem !== undefined) console.log(`${legLabel(leg)}: FAILED: ${leg.problem}`);
  }
  if (typeof sim === 'string') console.log(`sim: ${sim}`);
  for (const leg of report.legs) for (const note of leg.notes ?? []) console.log(`${legLabel(leg)}: ${note}`);
  for (const leg of report.legs) {
    if (leg.cpuPerGiBByRole !== undefined)
      console.log(
        `${legLabel(leg)}: CPU-s/GiB by role (user + kernel): ${cpuByRoleLine(leg.cpuPerGiBByRole)}`,
      );
  }
  for (const leg of report.legs) {
    const rtt = leg.schedulerRttMs;
    if (rtt === undefined) continue;
    console.log(
      `${legLabel(leg)}: the scheduler's connections' TCP RTT (ss -ti in its namespace every 0.5 s, connections that sent since the last look, queueing included): ` +
        `p50 ${rtt.p50.toFixed(2)} ms, p90 ${rtt.p90.toFixed(2)} ms (${rtt.samples} samples)`,
    );
  }
  for (const line of roundsComparisonLines(
    report.legs,
    typeof sim === 'string' ? undefined : sim.tLastSeconds,
  ))
    console.log(line);
  printNotes(report);
}

function printNotes(report: Report): void {
  const names = new Set(report.legs.map((leg) => leg.leg));
  if (names.has('swarm')) {
    console.log(
      'swarm: the user flow with cold agents: from the start of `weightcast agent` on every host (the pull ' +
        (report.pullStart === 'launch'
          ? 'starting with it, waiting for it to listen: --pull-start launch'
          : 'starting as its agent prints its listening line') +
        ') until `weightcast pull --agent` exits 0 with the files at its destination.',
    );
  }
  if (names.has('swarm-warm')) {
    console.log(
      'swarm-warm: agents started and warmed up before the clock, asked through their local API at once, ' +
        'until each holds the model verified; + copy out: plus `pull --agent` run on every host afterwards.',
    );
  }
  if (names.has('bittorrent')) {
    console.log(
      'bittorrent: aria2c on every host from the clock, tracker (opentracker) and seeder (aria2c) on the ' +
        "origin's host; a host is done when aria2c reports the download complete (every piece's SHA-1 checked).",
    );
  }
  if (names.has('chain')) {
    console.log(
      'chain: socat + tee relay origin -> host1 -> ... -> hostN; a host is done when tar has extracted.',
    );
  }
  if (names.has('node-chain')) {
    console.log(
      'node-chain: the same relay with a minimal Node.js process per host (bench/node-relay.ts: reads into reused ' +
        "1 MiB buffers, SHA-256 per piece, a positioned write, the same buffer forwarded); a host is done when every piece matched. What Node itself costs at the links' pace.",
    );
  }
  if (names.has('store-chain')) {
    console.log(
      'store-chain: the node-chain with each piece kept as an agent keeps it (bench/node-relay.ts --store: reads into ' +
        "the piece's own direct-I/O buffer, forwarded from there, then PieceStore.put: verified, written with O_DIRECT, " +
        "journalled, files synced and renamed); what the piece store adds to Node's floor at the links' pace.",
    );
  }
  if (names.has('store-ring')) {
    console.log(
      'store-ring: the ring all-gather proposed for healthy swarms (bench/ring-relay.ts): host i takes the pieces ' +
        'p mod N = i from the origin and the rest from host i-1, keeps each as an agent does (as store-chain), then ' +
        'pushes it on to host i+1 (a 4-byte piece number per piece; no scheduler, no request or report per piece).',
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
        `over S; it includes protocol headers${report.schedulerOn === 'origin' ? " and the scheduler's messages (it runs on the origin's host)" : ' (the scheduler runs on a control machine of its own)'}.`,
    );
  } else {
    console.log(
      'origin / S on loopback: bytes the origin-side processes wrote (/proc/PID/io wchar), over S; ' +
        'hosts are capped only by their own processes.',
    );
  }
  console.log(
    report.cgroupProblem === undefined
      ? "CPU-s/GiB: user and kernel CPU time of all the leg's processes (each leg in a cgroup of its own: origin " +
          'server, scheduler, agents, pulls, tracker, seeders, relays) from the clock to the last host, over the GiB ' +
          'delivered (hosts x S). Kernel time includes system calls and the network softirq work that ran on those ' +
          "processes, not softirq work in ksoftirqd or on other tasks, nor the benchmark's own process."
      : `CPU-s/GiB: from /proc of the leg's processes alive at each reading and the reaped ones (no cgroups: ${report.cgroupProblem}).`,
  );
  console.log(
    `cores: leg = its processes' CPU over the leg's wall time; machine = the whole machine (/proc/stat: other ` +
      `work and steal included), of ${cpus().length}. Near ${cpus().length} the cores, not the links, set the pace.`,
  );
}

async function main(argv: readonly string[]): Promise<number> {
  const options = optionsOrExitCode(
    () => parseOptions(argv, tmpdir()),
    USAGE,
    'bench:fanout',
    (error) => error instanceof UsageError,
  );
  if ('exitCode' in options) return options.exitCode;
  const problem = options.loopback ? 'forced by --loopback' : await netnsProblem();
  ensureClusterTokens();
  const modeNote =
    problem === undefined
      ? `testbed: a network namespace per host (and one control machine) on a Linux bridge, tc tbf caps on every link, both directions, MTU ${options.mtu}`
      : `LOOPBACK MODE: no network namespaces (${problem}); everything runs on 127.0.0.1, capped only by the processes themselves`;
  if (problem !== undefined) log(`NOTE: ${modeNote}`);
  const cgroupsProblem = cgroupProblem();
  if (cgroupsProblem !== undefined)
    log(`NOTE: no per-leg cgroups (${cgroupsProblem}): CPU is read from /proc`);
  const loadAverageAtStart = loadavg()[0] ?? 0;
  const nodeStartNote = applyNodeExtraCa(options.nodeExtraCa);
  if (nodeStartNote !== undefined) log(`NOTE: ${nodeStartNote}`);

  await mkdir(options.work, { recursive: true });
  const work = await mkdtemp(join(options.work, 'weightcast-fanout-'));
  const root = new ChildRegistry();
  let hostSet: HostSet | undefined;
  let cgroups: CgroupTree | undefined;
  const disposeAbruptEnd = onAbruptEnd((reason) => {
    hostSet?.closeSync();
    root.killAllSync();
    cgroups?.closeSync();
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
    // The simulator moves whole pieces: it is given the scheduler's transfer units as its pieces.
    const sim = await predict(setting, model.unitBytes, options, root, simLinkShare);
    if (cgroupsProblem === undefined)
      cgroups = await CgroupTree.create(testbedTag(process.pid, randomInt(26)));
    hostSet =
      problem === undefined
        ? await createTestbed({
            hosts: options.hosts,
            hostMbps: options.mbps,
            originMbps: options.originMbps,
            mtu: options.mtu,
          })
        : new LoopbackHosts(options.hosts, options.mbps, options.originMbps);
    const measurements: Array<{ measurement: LegMeasurement; round: number | undefined }> = [];
    let originServer: OriginServerKind = 'weightcast';
    try {
      const logDir = join(work, 'logs');
      await mkdir(logDir, { recursive: true });
      const services = await cgroups?.leaf('services');
      const resolved = resolveOriginServer(
        options.originServer,
        hostSet.mode,
        missingTools(['nginx']).length === 0,
      );
      if ('problem' in resolved) throw new UsageError(resolved.problem);
      originServer = resolved.server;
      const origin = await startOrigin({ hostSet, logDir, services, model, work }, originServer);
      log(
        `origin (${originServerLabel(originServer)}) serving ${model.originRoot} at ${origin.url}; process output goes to ${logDir} (--keep keeps it)`,
      );
      const base: LegContext = {
        hostSet,
        model,
        modelUrl: `${origin.url}model/`,
        originUrl: origin.url,
        originPid: origin.pid,
        setting,
        work,
        logDir,
        options,
        node: NODE,
        cli: CLI,
        cgroups,
        services,
      };
      for (let round = 1; round <= options.rounds; round++) {
        // Each round in directories of its own: no leg starts with what an earlier round left.
        const context: LegContext =
          options.rounds === 1
            ? base
            : { ...base, round, work: join(work, `round-${round}`), logDir: join(logDir, `round-${round}`) };
        await mkdir(context.logDir, { recursive: true });
        await mkdir(context.work, { recursive: true });
        if (options.rounds > 1) log(`round ${round} of ${options.rounds}`);
        const legs = {
          naive: async () => [await naiveLeg(context)],
          swarm: async () => [await swarmLeg(context)],
          'swarm-warm': () => swarmWarmLeg(context),
          bittorrent: async () => [await bittorrentLeg(context)],
          chain: async () => [await chainLeg(context)],
          'node-chain': async () => [await nodeChainLeg(context)],
          'store-chain': async () => [await nodeChainLeg(context, true)],
          'store-ring': async () => [await storeRingLeg(context)],
        };
        for (const leg of options.legs) {
          for (const measurement of await legs[leg]())
            measurements.push({ measurement, round: context.round });
        }
      }
      if (options.keep && process.env['WEIGHTCAST_TRACE_PIECES'] === '1') {
        log(`where the swarm's time went: node dist/bench/trace-report.js ${logDir}`);
      }
    } finally {
      await hostSet.close();
      await cgroups?.close();
    }
    const report: Report = {
      mode: hostSet.mode,
      modeNote,
      loadAverageAtStart,
      ...(nodeStartNote === undefined ? {} : { nodeStartNote }),
      setting: {
        ...setting,
        pieceMb: model.pieceBytes / MiB,
        pieces: model.pieces,
        unitPieces: model.unitPieces,
        units: model.units,
        digest: model.digest,
      },
      tLowerBoundSeconds: lowerBoundSeconds(setting),
      naiveFluidSeconds: naiveFluidSeconds(setting),
      chainFluidSeconds: chainFluidSeconds(setting, simLinkShare),
      sim,
      simLinkShare,
      mtu: options.mtu,
      schedulerOn: options.schedulerOn,
      originServer,
      pullStart: options.pullStart,
      cgroupProblem: cgroupsProblem,
      legs: measurements.map(({ measurement, round }) => ({
        ...summarizeLeg(measurement, setting),
        ...(round === undefined ? {} : { round }),
      })),
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
