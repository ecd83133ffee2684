/**
 * What every leg of bench:fanout shares: starting commands on the hosts behind a starting gate,
 * timing each host to its finish (an exit or a line on stdout), the leg's clocks (CPU time of the
 * leg's cgroup, the machine's busy time, the origin's TX counter) and the verification of every
 * host's copy against the manifest afterwards, outside the timing.
 *
 * A leg opens a `LegMeter`: each of its processes is started behind a gate, moved into the leg's
 * cgroup while it waits there (`meter.adopt`) and then released, so everything it forks is counted;
 * `meter.start()` is read at the release of the hosts' gate and `meter.stop()` when the last host
 * has finished. The origin's file server, which serves several legs, is moved into the leg's cgroup
 * for the leg and back out afterwards.
 */

import type { ChildProcess } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { cpus } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { cpuDifference, type Cgroup, type CgroupTree, type CpuTimes } from './cgroup.js';
import { firstMatch, saveOutput, stopChild, tailOf, waitForExit } from './children.js';
import { listensOn, parseSsRttsMs, ssConnectionsArgv, wrapCommand, type WrapOptions } from './commands.js';
import type { Options } from './options.js';
import type { Endpoint } from './plan.js';
import {
  CLOCK_TICKS_PER_SECOND,
  parseMachineBusyTicks,
  parseProcStatTicks,
  startCpuLines,
  type LegMeasurement,
  type Setting,
  type StartReading,
} from './report.js';
import type { HostSet } from './testbed.js';

/** How long a service may take to print its listening line or a gated command its `ready`. */
export const START_TIMEOUT_MS = 30_000;
/** Every leg gets at least this long, and at least `LEG_TIMEOUT_FACTOR` x its fluid time. */
export const LEG_TIMEOUT_MIN_MS = 120_000;
export const LEG_TIMEOUT_FACTOR = 5;
const VERIFY_TIMEOUT_MS = 300_000;
/** Copies verified at once: hashing is CPU-bound and the benchmark is sized for 2 cores. */
const VERIFY_PARALLEL = 2;
/** A short helper command (ss, a scrape) in a namespace. */
const PROBE_TIMEOUT_MS = 10_000;
const PROBE_INTERVAL_MS = 50;

export const log = (text: string): void => void process.stderr.write(`${text}\n`);

export interface Model {
  /** The model's directory: `<origin root>/model`. */
  dir: string;
  /** The directory the origin serves (the model and, for swarm-warm, the warm-up model). */
  originRoot: string;
  manifestPath: string;
  totalBytes: number;
  pieceBytes: number;
  pieces: number;
  /** What the scheduler moves per transfer (transfer-units.ts): pieces per unit, units, the largest unit's bytes. */
  unitPieces: number;
  units: number;
  unitBytes: number;
  digest: string;
}

export interface LegContext {
  hostSet: HostSet;
  model: Model;
  /** The model's URL at the origin. */
  modelUrl: string;
  /** The origin server's root URL. */
  originUrl: string;
  /** The origin file server's PID (moved into each leg's cgroup for the leg). */
  originPid: number | undefined;
  setting: Setting;
  work: string;
  logDir: string;
  options: Options;
  node: string;
  cli: string;
  /** Per-leg cgroups; undefined where they cannot be made (CPU from /proc then). */
  cgroups: CgroupTree | undefined;
  /** Where long-running processes wait between legs. */
  services: Cgroup | undefined;
  /** With `--rounds N` (N > 1): the round (1-based); its legs get cgroups and directories of their own. */
  round?: number;
}

/** `hostSet.spawnIn` behind `wrap`, with the child's output also appended to `<logDir>/<name>.log`. */
export function spawnLogged(
  context: Pick<LegContext, 'hostSet' | 'logDir'>,
  ns: string,
  argv: readonly string[],
  name: string,
  wrap: WrapOptions = {},
): ChildProcess {
  const child = context.hostSet.spawnIn(ns, wrapCommand(argv, wrap));
  saveOutput(child, join(context.logDir, `${name}.log`));
  return child;
}

export interface HostRun {
  seconds: number | undefined;
  problem?: string;
}

/** A leg that failed as a whole: said once, and every host counted unfinished with the reason. */
export function failedRuns(leg: string, hosts: number, error: unknown): HostRun[] {
  const message = error instanceof Error ? error.message : String(error);
  log(`${leg}: failed: ${message}`);
  return Array.from({ length: hosts }, () => ({ seconds: undefined, problem: message }));
}

/** How a host's command counts as finished: its exit with status 0, or a line on its stdout. */
export type Finish = { exit: true } | { line: RegExp };

/**
 * Waits for `child` to finish as `finish` says, until `deadline` (a performance.now() value), and
 * times it from `started`. A child still going at the deadline is stopped and counts as unfinished.
 */
/** Every host's child until it prints `line` (in host order), against one deadline from `started`. */
export function hostsPrint(
  children: readonly ChildProcess[],
  line: RegExp,
  started: number,
  deadline: number,
  labels: readonly string[],
): Promise<HostRun[]> {
  return Promise.all(
    children.map((child, index) =>
      hostFinish(child, { line }, started, deadline, labels[index] ?? String(index)),
    ),
  );
}

export async function hostFinish(
  child: ChildProcess,
  finish: Finish,
  started: number,
  deadline: number,
  label: string,
): Promise<HostRun> {
  const left = Math.max(0, deadline - performance.now());
  if ('line' in finish) {
    try {
      await firstMatch(child, finish.line, left, label);
      return { seconds: (performance.now() - started) / 1000 };
    } catch (error) {
      return { seconds: undefined, problem: error instanceof Error ? error.message : String(error) };
    }
  }
  const exit = await waitForExit(child, left);
  const seconds = (performance.now() - started) / 1000;
  if (exit === undefined) {
    await stopChild(child);
    return { seconds: undefined, problem: `${label}: still running after ${Math.round(left / 1000)} s` };
  }
  if (exit.code !== 0) return { seconds: undefined, problem: `${label}: ${exitText(exit, child)}` };
  return { seconds };
}

export function exitText(exit: { code: number | null; signal: string | null }, child: ChildProcess): string {
  const { stdout, stderr } = tailOf(child);
  const said = (stderr.trim() || stdout.trim()).split('\n').slice(-3).join(' / ');
  return `exit ${exit.code ?? exit.signal}${said === '' ? '' : `: ${said}`}`;
}

/** Waits for every child's `ready` line (the gate, or a self-gated command's own). */
export async function allReady(children: readonly ChildProcess[], labels: readonly string[]): Promise<void> {
  await Promise.all(
    children.map((child, index) =>
      firstMatch(child, /^ready$/, START_TIMEOUT_MS, labels[index] ?? String(index)),
    ),
  );
}

/**
 * Starts a long-running process of a leg (a tracker, a seeder, a scheduler) in the leg's cgroup:
 * behind the gate, adopted, released. It is pushed on `services` at once, so the caller stops it
 * whatever happens here.
 */
export async function startService(
  context: LegContext,
  meter: LegMeter,
  services: ChildProcess[],
  ns: string,
  argv: readonly string[],
  name: string,
  options: { role: string; mergeStderr?: boolean },
): Promise<ChildProcess> {
  const child = spawnLogged(context, ns, argv, name, {
    gate: true,
    mergeStderr: options.mergeStderr === true,
  });
  services.push(child);
  await allReady([child], [name]);
  await meter.adopt([child], options.role);
  release(child);
  return child;
}

/** Opens the gate of a child started with `gate: true` (or a self-gated one). */
export function release(child: ChildProcess): void {
  child.stdin?.end('go\n');
}

/**
 * Starts `argvFor(host)` on every host at once and times each to its finish. "At once" through a
 * starting gate: each host's command waits in a shell that has said `ready`; once every shell has,
 * the meter starts and all are released together (spawning a process in a namespace takes ~10 ms
 * here, so without the gate the eighth host would start ~90 ms after the first). A `selfGated`
 * command (the swarm-warm join client) says `ready` itself, after its own start-up.
 */
export async function runOnEveryHost(
  context: LegContext,
  meter: LegMeter,
  argvFor: (host: Endpoint, index: number) => string[],
  timeoutMs: number,
  name: string,
  options: { selfGated?: boolean; finish?: Finish; role?: string } = {},
): Promise<HostRun[]> {
  const { hostSet } = context;
  const children = hostSet.hosts.map((host, index) =>
    spawnLogged(context, host.ns, argvFor(host, index), `${name}-${host.label}`, {
      gate: options.selfGated !== true,
    }),
  );
  await allReady(
    children,
    hostSet.hosts.map((host) => `${name} on ${host.label}`),
  );
  await meter.adopt(children, options.role ?? name);
  const started = await meter.start();
  for (const child of children) release(child);
  const deadline = started + timeoutMs;
  const runs = await Promise.all(
    children.map((child, index) =>
      hostFinish(
        child,
        options.finish ?? { exit: true },
        started,
        deadline,
        hostSet.hosts[index]?.label ?? String(index),
      ),
    ),
  );
  await meter.stop();
  return runs;
}

/**
 * The clocks of one leg: CPU of its processes (the leg's cgroup, or /proc of the live processes when
 * there is no cgroup), the machine's busy time and the origin's TX counter, from `start` (the
 * release) to `stop` (the last host's finish).
 */
export class LegMeter {
  readonly leg: string;
  readonly #context: LegContext;
  readonly #cgroup: Cgroup | undefined;
  #before:
    | {
        cpu: CpuTimes | undefined;
        roles: Map<string, CpuTimes>;
        machine: number | undefined;
        tx: number;
        at: number;
      }
    | undefined;
  #result: Omit<LegMeasurement, 'leg' | 'hostSeconds' | 'hostsVerified'> | undefined;

  /** The leg's cgroup's name: the leg's, with its round when there are several. */
  readonly #leaf: string;
  /** Role CPU read at set times after the clock (sampleStart), for the start-up table. */
  readonly #startReadings: StartReading[] = [];
  #startSampling: Promise<void> | undefined;
  #stopped = false;

  private constructor(context: LegContext, leg: string, leaf: string, cgroup: Cgroup | undefined) {
    this.#context = context;
    this.leg = leg;
    this.#leaf = leaf;
    this.#cgroup = cgroup;
  }

  static async open(context: LegContext, leg: string): Promise<LegMeter> {
    const leaf = context.round === undefined ? leg : `${leg}-${context.round}`;
    const cgroup = await context.cgroups?.leaf(leaf);
    if (cgroup !== undefined && context.originPid !== undefined)
      await (await cgroup.child('origin')).adopt(context.originPid);
    return new LegMeter(context, leg, leaf, cgroup);
  }

  /**
   * Moves processes of ours (waiting at their gate, or a previous phase's services) into this leg's
   * cgroup, under `role` (agents, pulls, ...): the leg's CPU is also reported per role.
   */
  async adopt(children: readonly ChildProcess[], role: string): Promise<void> {
    if (this.#cgroup === undefined) return;
    await (await this.#cgroup.child(role)).adoptChildren(children);
  }

  /** Reads the clocks; returns the start time (performance.now()). */
  async start(): Promise<number> {
    const tx = await this.#context.hostSet.txBytes(this.#context.hostSet.origin.ns);
    const cpu = await this.#cpu();
    const roles = await this.#roleCpu();
    const machine = machineBusySeconds();
    const at = performance.now();
    this.#before = { cpu, roles, machine, tx, at };
    return at;
  }

  /**
   * Reads each role's CPU (and the machine's busy time) every `stepMs` from the clock until `untilMs`
   * or stop(), whichever comes first: how the start's CPU was spent (startLines). Only with cgroups.
   */
  sampleStart(stepMs: number, untilMs: number): void {
    const before = this.#before;
    if (before === undefined || this.#cgroup === undefined || this.#startSampling !== undefined) return;
    this.#startSampling = (async () => {
      for (let step = 1; step * stepMs <= untilMs && !this.#stopped; step++) {
        await sleep(Math.max(0, before.at + step * stepMs - performance.now()));
        if (this.#stopped) return;
        const roles = await this.#roleCpu();
        const machine = machineBusySeconds();
        const sums = new Map<string, number>();
        for (const [role, times] of roles) {
          const start = before.roles.get(role) ?? { userSeconds: 0, systemSeconds: 0 };
          const used = cpuDifference(times, start);
          sums.set(role, used.userSeconds + used.systemSeconds);
        }
        this.#startReadings.push({
          atSeconds: (performance.now() - before.at) / 1000,
          roles: sums,
          ...(machine === undefined || before.machine === undefined
            ? {}
            : { machineBusySeconds: machine - before.machine }),
        });
      }
    })().catch(() => undefined);
  }

  /** The start-up table from sampleStart's readings (none without them). */
  startLines(): string[] {
    return startCpuLines(this.#startReadings, cpus().length);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    const before = this.#before;
    if (before === undefined || this.#result !== undefined) return;
    const cpu = await this.#cpu();
    const roles = await this.#roleCpu();
    const machine = machineBusySeconds();
    const wallSeconds = (performance.now() - before.at) / 1000;
    const cpuByRole = [...roles].map(([role, after]) => ({
      role,
      ...cpuDifference(after, before.roles.get(role) ?? { userSeconds: 0, systemSeconds: 0 }),
    }));
    const tx = await this.#context.hostSet.txBytes(this.#context.hostSet.origin.ns);
    const used = cpu === undefined || before.cpu === undefined ? undefined : cpuDifference(cpu, before.cpu);
    this.#result = {
      originBytes: tx - before.tx,
      wallSeconds,
      ...(used === undefined ? {} : { cpu: used, cpuSource: this.#cgroup === undefined ? 'proc' : 'cgroup' }),
      ...(cpuByRole.length === 0 ? {} : { cpuByRole }),
      ...(machine === undefined || before.machine === undefined
        ? {}
        : { machineCores: (machine - before.machine) / wallSeconds }),
    };
    // Its readings end at the next step (it sleeps at most one), after this leg's own.
    await this.#startSampling;
    if (used !== undefined) {
      const delivered = (this.#context.hostSet.hosts.length * this.#context.model.totalBytes) / 2 ** 30;
      log(
        `${this.leg}: ${used.userSeconds.toFixed(1)} user + ${used.systemSeconds.toFixed(1)} kernel CPU-s, ` +
          `${((used.userSeconds + used.systemSeconds) / delivered).toFixed(2)} per GiB delivered`,
      );
    }
  }

  /** The measurement with the meter's readings (none if `start` was never reached). */
  measurement(leg: string, runs: readonly HostRun[], hostsVerified: number): LegMeasurement {
    const problems = runs.flatMap((run) => (run.problem === undefined ? [] : [run.problem]));
    return {
      leg,
      hostSeconds: runs.map((run) => run.seconds),
      hostsVerified,
      originBytes: undefined,
      ...this.#result,
      ...(problems.length === 0 ? {} : { problem: problems.join('; ') }),
    };
  }

  /** Moves the origin server back out, then stops whatever is left in the leg's cgroup and removes it. */
  async close(): Promise<void> {
    this.#stopped = true;
    const { services, originPid, cgroups } = this.#context;
    if (this.#cgroup === undefined) return;
    if (services !== undefined && originPid !== undefined)
      await services.adopt(originPid).catch(() => undefined);
    await cgroups?.removeLeaf(this.#leaf);
  }

  async #roleCpu(): Promise<Map<string, CpuTimes>> {
    const roles = new Map<string, CpuTimes>();
    for (const [role, cgroup] of this.#cgroup?.children ?? []) roles.set(role, await cgroup.cpu());
    return roles;
  }

  async #cpu(): Promise<CpuTimes | undefined> {
    if (this.#cgroup !== undefined) return this.#cgroup.cpu();
    return procCpu(this.#context.hostSet.livePids());
  }
}

/**
 * Without cgroups: the CPU of the live processes `pids` plus what this process's reaped children
 * used (a child that exits between two readings moves from the first sum to the second).
 */
function procCpu(pids: readonly number[]): CpuTimes | undefined {
  const self = readTicks('self');
  if (self === undefined) return undefined;
  let user = self.reapedChildrenUser;
  let system = self.reapedChildrenSystem;
  for (const pid of pids) {
    const ticks = readTicks(String(pid));
    user += ticks?.user ?? 0;
    system += ticks?.system ?? 0;
  }
  return { userSeconds: user / CLOCK_TICKS_PER_SECOND, systemSeconds: system / CLOCK_TICKS_PER_SECOND };
}

function readTicks(pid: string): ReturnType<typeof parseProcStatTicks> {
  try {
    return parseProcStatTicks(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

function machineBusySeconds(): number | undefined {
  try {
    const ticks = parseMachineBusyTicks(readFileSync('/proc/stat', 'utf8'));
    return ticks === undefined ? undefined : ticks / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/** Verifies every host's copy (outside the timing), removes `cleanUp` unless --keep, and measures the leg. */
export async function verifyAndMeasure(
  context: LegContext,
  meter: LegMeter,
  leg: string,
  runs: readonly HostRun[],
  dirs: readonly string[],
  cleanUp: string,
): Promise<LegMeasurement> {
  for (const run of runs) if (run.problem !== undefined) log(`  ${run.problem}`);
  log(`${leg}: verifying ${dirs.length} copies`);
  const verified = runs.some((run) => run.seconds !== undefined) ? await verifyCopies(context, dirs) : 0;
  if (!context.options.keep) await rm(cleanUp, { recursive: true, force: true });
  return meter.measurement(leg, runs, verified);
}

/** `weightcast verify` on every host's copy, `VERIFY_PARALLEL` at a time; the number that match. */
export async function verifyCopies(context: LegContext, dirs: readonly string[]): Promise<number> {
  const { hostSet, model } = context;
  let verified = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let index = next++; index < dirs.length; index = next++) {
      const host = hostSet.hosts[index];
      const dir = dirs[index];
      if (host === undefined || dir === undefined) continue;
      const argv = [context.node, context.cli, 'verify', dir, '--manifest', model.manifestPath, '--json'];
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

/** Runs a short command in `ns` to its end; its stdout (the last few KiB), or an error. */
export async function runIn(hostSet: HostSet, ns: string, argv: readonly string[]): Promise<string> {
  const child = hostSet.spawnIn(ns, argv);
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const exit = await waitForExit(child, PROBE_TIMEOUT_MS);
  if (exit === undefined) {
    await stopChild(child);
    throw new Error(`${argv[0] ?? ''}: no exit within ${PROBE_TIMEOUT_MS} ms`);
  }
  await Promise.race([closed, sleep(1000, undefined, { ref: false })]);
  if (exit.code !== 0) throw new Error(`${argv.join(' ')}: ${exitText(exit, child)}`);
  return tailOf(child).stdout;
}

/** Polls `check` every PROBE_INTERVAL_MS until it is true, for at most `timeoutMs`. */
export async function waitUntil(
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let lastError = '';
  while (performance.now() < deadline) {
    try {
      if (await check()) return;
    } catch (error) {
      lastError = `: ${error instanceof Error ? error.message : String(error)}`;
    }
    await sleep(PROBE_INTERVAL_MS);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms${lastError}`);
}

/** Waits until a TCP socket listens on `port` in the endpoint's namespace (`ss`, from iproute2). */
export function waitListening(
  hostSet: HostSet,
  endpoint: Endpoint,
  port: number,
  what: string,
): Promise<void> {
  return waitUntil(
    async () => listensOn(await runIn(hostSet, endpoint.ns, ['ss', '-Hltn']), port),
    START_TIMEOUT_MS,
    `${what} listening on ${endpoint.address}:${port}`,
  );
}

/** The tools missing from PATH. */
export function missingTools(tools: readonly string[]): string[] {
  const dirs = (process.env['PATH'] ?? '').split(delimiter).filter((dir) => dir !== '');
  return tools.filter(
    (tool) =>
      !dirs.some((dir) => {
        try {
          accessSync(join(dir, tool), constants.X_OK);
          return true;
        } catch {
          return false;
        }
      }),
  );
}

/** Stops every child (SIGTERM, then SIGKILL), at once. */
export async function stopAll(children: readonly ChildProcess[]): Promise<void> {
  await Promise.all(children.map((child) => stopChild(child)));
}

/** How often `RttSampler` reads the connections' round-trip times. */
const RTT_SAMPLE_INTERVAL_MS = 500;

/**
 * Samples the kernel's smoothed RTT of every established TCP connection on `port` in an endpoint's
 * namespace (`ss -ti`) until stopped: for the scheduler, the round trip its sync messages see,
 * queueing in the capped links included (not the scheduler's own processing time). Only connections
 * that sent something since the last sample count (an idle one's RTT is as of its last exchange).
 */
export class RttSampler {
  readonly #samplesMs: number[] = [];
  #stopped = false;
  #loop: Promise<void> | undefined;

  constructor(
    private readonly hostSet: HostSet,
    private readonly endpoint: Endpoint,
    private readonly port: number,
  ) {}

  start(): void {
    if (this.hostSet.mode !== 'netns' || this.#loop !== undefined) return;
    this.#loop = this.#run();
  }

  async stop(): Promise<number[]> {
    this.#stopped = true;
    await this.#loop;
    return [...this.#samplesMs];
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      try {
        this.#samplesMs.push(
          ...parseSsRttsMs(
            await runIn(this.hostSet, this.endpoint.ns, ssConnectionsArgv(this.port)),
            RTT_SAMPLE_INTERVAL_MS,
          ),
        );
      } catch {
        // A sample missed (the testbed closing, a slow ss): the next one counts.
      }
      await sleep(RTT_SAMPLE_INTERVAL_MS);
    }
  }
}
