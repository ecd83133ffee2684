/**
 * `npm run bench:chaos`: the user's flow (every host starts `weightcast agent`, then `weightcast
 * pull URL --manifest M --to DIR --agent URL`) once without faults, the reference, and then once
 * per fault, injected on purpose by the benchmark, each row from cold (a fresh scheduler, fresh
 * agents, empty caches and destinations):
 *
 * - kill-agents: kill -9 of a quarter of the agents and their pulls at 30 % of the fault-free time,
 *   then each agent started again on its cache and port, and its pull again;
 * - stop-scheduler: SIGSTOP of the scheduler for 20 s, then SIGCONT;
 * - stop-scheduler-kill: the same, and 6 s into the stop (the members on their own) kill -9 of the
 *   kill-agents row's hosts, restarted as there: two faults at once;
 * - restart-scheduler: kill -9 of the scheduler, and a new one on the same address and port;
 * - origin-503: the origin answers every request 503 for 10 s (`chaos/fault-origin.ts`);
 * - corrupt-peer: one agent serves wrong bytes from the start (its hidden --inject-corrupt-uploads);
 * - disk-full: one host's cache and destination on a tmpfs a quarter of the model's size (root):
 *   that host is expected to end with IO (ENOSPC), the others to complete.
 *
 * Each row: hosts completed (the pull exited 0 and the destination matches the manifest), wall time
 * until the last completed host and its ratio to the fault-free row, origin bytes over S, and the
 * bytes of pieces at final names that do not match the manifest's SHA-256 (must be 0).
 *
 * The testbed is `netns/testbed.ts` (a namespace per host, tc caps, MTU 1500) as root with `ip
 * netns`; otherwise, or with --loopback, everything runs on 127.0.0.1 and says so. The scheduler
 * runs on a control machine of its own, so the origin's bytes are the origin's alone. Flags:
 * CHAOS_USAGE in `chaos/plan.ts`.
 */

import { execFile, execFileSync, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { buildManifest } from '../src/manifest/build.js';
import { manifestDigest, writeManifest, type Manifest } from '../src/manifest/manifest.js';
import { verifyDirectory } from '../src/manifest/verify.js';
import { LocalOrigin } from '../src/origin/local.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { formatBytes, formatSeconds } from '../src/util/units.js';
import { HostRun } from './chaos/host-run.js';
import {
  CHAOS_USAGE,
  ChaosUsageError,
  diskFullBytes,
  faultAtMs,
  faultTargets,
  ORIGIN_OUTAGE_MS,
  parseChaosOptions,
  rowTimeoutMs,
  KILL_AFTER_STOP_MS,
  SCHEDULER_STOP_MS,
  type ChaosOptions,
  type FaultTargets,
  type RowKind,
} from './chaos/plan.js';
import { chaosTable, checkCopy, summarizeRow, type HostOutcome, type RowResult } from './chaos/report.js';
import { onAbruptEnd, firstMatch, stopChild, waitForExit } from './netns/children.js';
import { ensureClusterTokens } from './netns/cluster-tokens.js';
import { userPullArgv, weightcastCommand } from './netns/commands.js';
import { log, spawnLogged, START_TIMEOUT_MS } from './netns/leg-runtime.js';
import { MTU_DEFAULT, tcpPayloadShare } from './netns/plan.js';
import { lowerBoundSeconds } from './netns/report.js';
import { optionsOrExitCode } from './netns/options.js';
import { createTestbed, LoopbackHosts, netnsProblem, servicePort, type HostSet } from './netns/testbed.js';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** The `weightcast` command as users start it (the launcher). */
const WEIGHTCAST = join(ROOT, 'bin', 'weightcast');
const FAULT_ORIGIN = fileURLToPath(new URL('./chaos/fault-origin.js', import.meta.url));
const NODE = process.execPath;
/** The services' ports inside the namespaces (each endpoint has an address of its own). */
const SCHEDULER_PORT = 7000;
const AGENT_PORT = 7100;
const SCHEDULER_LISTENING = /weightcast scheduler listening on (http:\/\/\S+)/;
const VERIFY_THREADS = 2;

interface Bench {
  options: ChaosOptions;
  hostSet: HostSet;
  manifest: Manifest;
  manifestPath: string;
  modelBytes: number;
  modelUrl: string;
  origin: ChildProcess;
  targets: FaultTargets;
  work: string;
  logDir: string;
  /** Mount points of ours still mounted, for the cleanup on a signal. */
  mounts: Set<string>;
}

async function prepareModel(
  work: string,
  options: ChaosOptions,
): Promise<{ dir: string; manifest: Manifest }> {
  const dir = join(work, 'origin', 'model');
  log(`synthesising a ${options.sizeMb} MiB Llama-style checkpoint (seed ${options.seed})`);
  await synthesizeModel({
    dir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: options.sizeMb * MiB,
    seed: options.seed,
  });
  const local = new LocalOrigin(dir);
  const manifest = await buildManifest(local).finally(() => local.close());
  return { dir, manifest };
}

/** The fault origin in the origin's namespace (capped by itself on loopback); its URL. */
async function startOrigin(
  hostSet: HostSet,
  logDir: string,
  root: string,
  mbps: number,
): Promise<{ child: ChildProcess; url: string }> {
  const argv = [
    NODE,
    FAULT_ORIGIN,
    '--root',
    root,
    '--host',
    hostSet.origin.address,
    '--port',
    '0',
    ...(hostSet.mode === 'loopback' ? ['--rate-mbps', String(mbps)] : []),
  ];
  const child = spawnLogged({ hostSet, logDir }, hostSet.origin.ns, argv, 'origin');
  const line = await firstMatch(child, /^\{"url":.*\}$/, START_TIMEOUT_MS, 'fault origin');
  return { child, url: (JSON.parse(line[0]) as { url: string }).url };
}

async function startScheduler(bench: Bench, port: number, name: string): Promise<ChildProcess> {
  const { hostSet, logDir } = bench;
  const argv = [
    WEIGHTCAST,
    'scheduler',
    '--port',
    String(port),
    '--host',
    hostSet.control.address,
    ...bench.options.ring,
  ];
  const child = spawnLogged({ hostSet, logDir }, hostSet.control.ns, argv, name);
  await firstMatch(child, SCHEDULER_LISTENING, START_TIMEOUT_MS, name);
  return child;
}

interface HostPaths {
  dest: string;
  cache: string;
}

/** Each host's destination and cache; the disk-full host's on a small tmpfs (mounted here). */
async function hostPaths(bench: Bench, kind: RowKind, rowDir: string): Promise<HostPaths[]> {
  const paths = bench.hostSet.hosts.map((host) => ({
    dest: join(rowDir, host.label),
    cache: join(rowDir, 'cache', host.label),
  }));
  if (kind !== 'disk-full') return paths;
  const small = join(rowDir, 'small');
  await mkdir(small, { recursive: true });
  await run('mount', ['-t', 'tmpfs', '-o', `size=${diskFullBytes(bench.modelBytes)}`, 'tmpfs', small]);
  bench.mounts.add(small);
  const host = bench.hostSet.hosts[bench.targets.diskFull];
  paths[bench.targets.diskFull] = { dest: join(small, host?.label ?? 'host'), cache: join(small, 'cache') };
  return paths;
}

async function unmount(bench: Bench, dir: string): Promise<void> {
  if (!bench.mounts.has(dir)) return;
  await run('umount', [dir]).catch(() => run('umount', ['-l', dir]));
  bench.mounts.delete(dir);
}

function hostRuns(
  bench: Bench,
  kind: RowKind,
  schedulerUrl: string,
  paths: readonly HostPaths[],
  ports: readonly number[],
): HostRun[] {
  const { hostSet, work, logDir, options } = bench;
  return hostSet.hosts.map((host, index) => {
    const agentPort = ports[index] ?? AGENT_PORT;
    const { dest, cache } = paths[index] ?? { dest: '', cache: '' };
    // tc caps the links in the namespaces; on loopback the agents cap themselves.
    const caps =
      hostSet.mode === 'loopback'
        ? ['--upload-mbps', String(options.mbps), '--download-mbps', String(options.mbps)]
        : [];
    const corrupt = kind === 'corrupt-peer' && index === bench.targets.corrupt;
    const agentArgv = [
      WEIGHTCAST,
      'agent',
      '--scheduler',
      schedulerUrl,
      '--cache',
      cache,
      '--port',
      String(agentPort),
      '--host',
      host.address,
      '--destination-root',
      work,
      ...caps,
      ...(corrupt ? ['--inject-corrupt-uploads'] : []),
    ];
    const pullArgv = userPullArgv({
      weightcast: weightcastCommand(WEIGHTCAST),
      source: bench.modelUrl,
      manifestPath: bench.manifestPath,
      dir: dest,
      agentUrl: `http://${host.address}:${agentPort}`,
    });
    return new HostRun({
      label: host.label,
      agentArgv,
      pullArgv,
      spawn: (argv, name) => spawnLogged({ hostSet, logDir }, host.ns, argv, `${kind}-${name}`),
    });
  });
}

/** The scheduler of a row, which the restart fault replaces. */
interface SchedulerSlot {
  current: ChildProcess;
}

/**
 * Applies the row's fault at its time after `started` and returns how it was applied, for the table.
 * Never waits past `deadline` to begin; a stop or an outage that began is always ended.
 */
async function applyFault(
  bench: Bench,
  kind: RowKind,
  runs: readonly HostRun[],
  scheduler: SchedulerSlot,
  schedulerPort: number,
  started: number,
  atMs: number | undefined,
  deadline: number,
): Promise<string> {
  const { targets, hostSet } = bench;
  const labels = (indices: readonly number[]): string =>
    indices.map((index) => hostSet.hosts[index]?.label ?? String(index)).join(', ');
  if (kind === 'none') return '-';
  if (kind === 'corrupt-peer') return `${labels([targets.corrupt])} serves wrong bytes`;
  if (kind === 'disk-full')
    return `${labels([targets.diskFull])} on a ${formatBytes(diskFullBytes(bench.modelBytes))} tmpfs`;
  if (atMs === undefined) throw new Error(`${kind}: no fault time`);
  await sleep(Math.max(0, Math.min(started + atMs, deadline) - performance.now()));
  const at = `at ${formatSeconds((performance.now() - started) / 1000)}`;
  if (kind === 'kill-agents') {
    const killed = await Promise.all(
      targets.killed.map((index) => runs[index]?.crash() ?? Promise.resolve(false)),
    );
    const missed = targets.killed.filter((_, i) => killed[i] !== true);
    log(`${kind}: kill -9 of ${labels(targets.killed)} ${at}`);
    return (
      `kill -9 ${labels(targets.killed)} ${at}, restarted` +
      (missed.length === 0 ? '' : ` (${labels(missed)} had already finished)`)
    );
  }
  if (kind === 'stop-scheduler' || kind === 'stop-scheduler-kill') {
    const pid = scheduler.current.pid;
    if (pid === undefined) throw new Error('the scheduler has no PID');
    process.kill(pid, 'SIGSTOP');
    log(`${kind}: SIGSTOP ${at}`);
    let killed = '';
    try {
      if (kind === 'stop-scheduler-kill') {
        await sleep(KILL_AFTER_STOP_MS);
        const done = await Promise.all(
          targets.killed.map((index) => runs[index]?.crash() ?? Promise.resolve(false)),
        );
        const missed = targets.killed.filter((_, i) => done[i] !== true);
        log(`${kind}: kill -9 of ${labels(targets.killed)} ${KILL_AFTER_STOP_MS / 1000} s later`);
        killed =
          `; kill -9 ${labels(targets.killed)} ${KILL_AFTER_STOP_MS / 1000} s in, restarted` +
          (missed.length === 0 ? '' : ` (${labels(missed)} had already finished)`);
      }
      await sleep(SCHEDULER_STOP_MS - (kind === 'stop-scheduler-kill' ? KILL_AFTER_STOP_MS : 0));
    } finally {
      process.kill(pid, 'SIGCONT');
      log(`${kind}: SIGCONT`);
    }
    return `SIGSTOP ${at} for ${SCHEDULER_STOP_MS / 1000} s${killed}`;
  }
  if (kind === 'restart-scheduler') {
    const old = scheduler.current;
    old.kill('SIGKILL');
    await waitForExit(old, 10_000);
    const before = performance.now();
    scheduler.current = await startScheduler(bench, schedulerPort, `${kind}-scheduler-2`);
    const took = formatSeconds((performance.now() - before) / 1000);
    log(`${kind}: kill -9 ${at}, listening again after ${took}`);
    return `kill -9 ${at}, back after ${took}`;
  }
  // origin-503
  const { origin } = bench;
  const refusedBefore = await refusedCount(origin);
  await originCommand(origin, `outage ${ORIGIN_OUTAGE_MS}`, /^\{"outage":/);
  log(`${kind}: 503 for ${ORIGIN_OUTAGE_MS / 1000} s ${at}`);
  await sleep(ORIGIN_OUTAGE_MS);
  const refused = (await refusedCount(origin)) - refusedBefore;
  return `503 ${at} for ${ORIGIN_OUTAGE_MS / 1000} s (${refused} requests refused)`;
}

/** Sends the fault origin one command and waits for its answer line. */
async function originCommand(
  origin: ChildProcess,
  command: string,
  answer: RegExp,
): Promise<RegExpExecArray> {
  const answered = firstMatch(origin, answer, START_TIMEOUT_MS, `fault origin, ${command}`);
  origin.stdin?.write(`${command}\n`);
  return answered;
}

async function refusedCount(origin: ChildProcess): Promise<number> {
  return Number((await originCommand(origin, 'refused', /^\{"refused":(\d+)\}$/))[1]);
}

async function runRow(bench: Bench, kind: RowKind, referenceMs: number): Promise<RowResult> {
  const { hostSet, options } = bench;
  const rowDir = join(bench.work, kind);
  const noHosts: HostOutcome[] = hostSet.hosts.map((host) => ({
    label: host.label,
    seconds: undefined,
    starts: 0,
  }));
  if (kind === 'disk-full' && process.getuid?.() !== 0)
    return {
      kind,
      fault: '-',
      hosts: noHosts,
      originBytes: undefined,
      skipped: 'needs root to mount a small tmpfs',
    };
  const timeoutMs = rowTimeoutMs(kind, referenceMs);
  log(
    `${kind}: ${hostSet.hosts.length} hosts start agent, then pull (timeout ${Math.round(timeoutMs / 1000)} s)`,
  );
  await mkdir(rowDir, { recursive: true });
  let runs: HostRun[] = [];
  let scheduler: SchedulerSlot | undefined;
  let paths: HostPaths[] = [];
  const result: RowResult = { kind, fault: '-', hosts: noHosts, originBytes: undefined };
  try {
    paths = await hostPaths(bench, kind, rowDir);
    const schedulerPort = await servicePort(hostSet, SCHEDULER_PORT);
    scheduler = { current: await startScheduler(bench, schedulerPort, `${kind}-scheduler`) };
    const schedulerUrl = `http://${hostSet.control.address}:${schedulerPort}`;
    const ports = await Promise.all(hostSet.hosts.map(() => servicePort(hostSet, AGENT_PORT)));
    runs = hostRuns(bench, kind, schedulerUrl, paths, ports);
    const txBefore = await hostSet.txBytes(hostSet.origin.ns);
    const started = performance.now();
    const deadline = started + timeoutMs;
    const outcomes = Promise.all(runs.map((hostRun) => hostRun.run(started, deadline)));
    const fault = applyFault(
      bench,
      kind,
      runs,
      scheduler,
      schedulerPort,
      started,
      faultAtMs(kind, referenceMs),
      deadline,
    );
    // Both settle: a fault that fails is the row's problem, the hosts still end by the deadline.
    const [hosts, applied] = await Promise.all([
      outcomes,
      fault.then(
        (text) => ({ text }),
        (error: unknown) => ({ error }),
      ),
    ]);
    result.originBytes = (await hostSet.txBytes(hostSet.origin.ns)) - txBefore;
    result.hosts = hosts;
    if ('text' in applied) result.fault = applied.text;
    else
      result.problem = `fault not applied: ${applied.error instanceof Error ? applied.error.message : String(applied.error)}`;
    if (kind === 'disk-full') result.expectedFailure = { host: bench.targets.diskFull, code: 'IO' };
  } catch (error) {
    result.problem = error instanceof Error ? error.message : String(error);
  } finally {
    await Promise.all(runs.map((hostRun) => hostRun.stop()));
    if (scheduler !== undefined) await stopChild(scheduler.current);
  }
  await checkCopies(bench, result, paths);
  for (const mount of [...bench.mounts]) await unmount(bench, mount);
  if (!options.keep) await rm(rowDir, { recursive: true, force: true });
  return result;
}

/** Every host's destination against the manifest, after the row (outside its timing). */
async function checkCopies(bench: Bench, result: RowResult, paths: readonly HostPaths[]): Promise<void> {
  log(`${result.kind}: checking ${paths.length} destinations against the manifest`);
  for (const [index, host] of result.hosts.entries()) {
    const dest = paths[index]?.dest;
    if (dest === undefined) continue;
    const report = await verifyDirectory(dest, bench.manifest, { threads: VERIFY_THREADS });
    host.copy = checkCopy(report, bench.manifest.pieceSize);
    const done = host.seconds === undefined ? (host.error ?? 'not done') : `${host.seconds.toFixed(1)} s`;
    log(
      `  ${host.label}: ${done}, ${host.copy.filesOk}/${host.copy.files} files match, starts ${host.starts}`,
    );
  }
}

function header(bench: Bench, modeNote: string): string[] {
  const { options, hostSet, manifest, modelBytes, targets } = bench;
  const label = (index: number): string => hostSet.hosts[index]?.label ?? String(index);
  const load = loadavg()[0] ?? 0;
  return [
    `chaos: ${options.hosts} hosts x ${options.mbps} Mbit/s up and down, origin ${options.mbps} Mbit/s, ` +
      `MTU ${hostSet.mode === 'netns' ? MTU_DEFAULT : '- (loopback)'}; a ${formatBytes(modelBytes)} model ` +
      `(${manifest.files.reduce((n, f) => n + f.pieces.length, 0)} pieces of ${formatBytes(manifest.pieceSize)}, ` +
      `${manifestDigest(manifest).slice(0, 19)}…), seed ${options.seed}; ` +
      (hostSet.mode === 'netns'
        ? 'the scheduler on a control machine of its own'
        : 'the scheduler a process of its own') +
      (options.ring.length > 0 ? ` (${options.ring.join(' ')})` : ''),
    modeNote,
    `faults hit: killed ${targets.killed.map(label).join(', ')}; corrupt peer ${label(targets.corrupt)}; ` +
      `disk full ${label(targets.diskFull)} (from the seed)`,
    `load average ${load.toFixed(2)} on ${cpus().length} cores at the end` +
      (load > 0.5 * cpus().length
        ? ': the machine was busy, so the times measure the contention as well'
        : ''),
  ];
}

function notes(mode: HostSet['mode']): string[] {
  return [
    'hosts done: the pull exited 0 and every file at its destination matches the manifest; wall: from the',
    '  start of the agents until the last host done; x fault-free: against the first row of this run.',
    `origin / S: ${mode === 'netns' ? "bytes sent by the origin namespace's eth0 (headers included)" : 'bytes the origin process wrote (/proc/PID/io)'} during the row, over S.`,
    'corrupt bytes: bytes of pieces at final names whose SHA-256 differs from the manifest (a file of the',
    '  wrong size counts whole), summed over every host after the row; pieces still in partial files do not count.',
  ];
}

async function main(argv: readonly string[]): Promise<number> {
  const options = optionsOrExitCode(
    () => parseChaosOptions(argv, tmpdir()),
    CHAOS_USAGE,
    'bench:chaos',
    (error) => error instanceof ChaosUsageError,
  );
  if ('exitCode' in options) return options.exitCode;
  const problem = options.loopback ? 'forced by --loopback' : await netnsProblem();
  const modeNote =
    problem === undefined
      ? `testbed: a network namespace per host (and the origin, and the control machine) on a Linux bridge, tc tbf caps on every link, MTU ${MTU_DEFAULT}`
      : `LOOPBACK MODE: no network namespaces (${problem}); everything runs on 127.0.0.1, capped only by the processes themselves`;
  if (problem !== undefined) log(`NOTE: ${modeNote}`);
  ensureClusterTokens();
  await mkdir(options.work, { recursive: true });
  const work = await mkdtemp(join(options.work, 'weightcast-chaos-'));
  const mounts = new Set<string>();
  let hostSet: HostSet | undefined;
  const disposeAbruptEnd = onAbruptEnd((reason) => {
    hostSet?.closeSync();
    for (const mount of mounts) {
      try {
        execFileSync('umount', ['-l', mount], { stdio: 'ignore', timeout: 10_000 });
      } catch {
        // Nothing more to do in a signal handler; the mount is under the work directory.
      }
    }
    if (!options.keep) rmSync(work, { recursive: true, force: true, maxRetries: 3 });
    log(
      `bench:chaos: ${reason}: stopped its processes, removed its testbed and mounts${options.keep ? '' : ` and ${work}`}`,
    );
  });
  try {
    const model = await prepareModel(work, options);
    const manifestPath = join(work, 'manifest.json');
    await writeManifest(manifestPath, model.manifest);
    const modelBytes = model.manifest.files.reduce((sum, file) => sum + file.size, 0);
    hostSet =
      problem === undefined
        ? await createTestbed({ hosts: options.hosts, hostMbps: options.mbps, originMbps: options.mbps })
        : new LoopbackHosts(options.hosts, options.mbps, options.mbps);
    const logDir = join(work, 'logs');
    await mkdir(logDir, { recursive: true });
    const origin = await startOrigin(hostSet, logDir, join(work, 'origin'), options.mbps);
    log(`origin at ${origin.url}; process output goes to ${logDir} (--keep keeps it)`);
    const bench: Bench = {
      options,
      hostSet,
      manifest: model.manifest,
      manifestPath,
      modelBytes,
      modelUrl: `${origin.url}model/`,
      origin: origin.child,
      targets: faultTargets(options.hosts, options.seed),
      work,
      logDir,
      mounts,
    };
    const setting = {
      hosts: options.hosts,
      totalBytes: modelBytes,
      hostMbps: options.mbps,
      originMbps: options.mbps,
    };
    // Until the fault-free row has run: the fluid bound at the payload's share of the caps.
    let referenceMs = (lowerBoundSeconds(setting) / tcpPayloadShare(MTU_DEFAULT)) * 1000;
    const summaries = [];
    for (const kind of options.rows) {
      const summary = summarizeRow(await runRow(bench, kind, referenceMs), modelBytes);
      log(`${kind}: ${summary.result}`);
      if (kind === 'none' && summary.ok && summary.wallSeconds !== undefined)
        referenceMs = summary.wallSeconds * 1000;
      summaries.push(summary);
    }
    await stopChild(origin.child);
    for (const line of [...header(bench, modeNote), '', ...chaosTable(summaries), '', ...notes(hostSet.mode)])
      console.log(line);
    return summaries.every((summary) => summary.ok) ? 0 : 1;
  } finally {
    await hostSet?.close();
    for (const mount of [...mounts]) {
      await run('umount', ['-l', mount]).catch(() => undefined);
      mounts.delete(mount);
    }
    disposeAbruptEnd();
    if (options.keep) log(`kept ${work}`);
    else await rm(work, { recursive: true, force: true });
  }
}

process.exitCode = await main(process.argv.slice(2));
