/**
 * The arithmetic and the table of `npm run bench:fanout`, pure: per-host finish times in, T_last,
 * p50, efficiency against the fluid bound and origin bytes per model copy out.
 */

import { fluidLowerBoundSeconds } from '../../src/sim/bound.js';
import { formatSeconds } from '../../src/util/units.js';
import { textTable } from '../../src/util/text-table.js';
import type { CpuTimes } from './cgroup.js';

export interface Setting {
  hosts: number;
  totalBytes: number;
  hostMbps: number;
  originMbps: number;
}

/** What one leg measured. A host's seconds are undefined when its pull failed or timed out. */
export interface LegMeasurement {
  leg: string;
  hostSeconds: Array<number | undefined>;
  hostsVerified: number;
  /** Bytes the origin host sent during the leg; undefined when not measured. */
  originBytes: number | undefined;
  /** CPU time of the leg's processes from the clock's start to the last host's finish, when known. */
  cpu?: CpuTimes;
  /** How `cpu` was counted: the leg's cgroup, or /proc of the processes still alive at the end. */
  cpuSource?: 'cgroup' | 'proc';
  /** The same per role of the leg's processes (origin, scheduler, agents, pulls, ...), with cgroups. */
  cpuByRole?: Array<CpuTimes & { role: string }>;
  /** Seconds between the two CPU readings. */
  wallSeconds?: number;
  /** Cores busy on the whole machine on average during the leg (other users' work included). */
  machineCores?: number;
  /** Swarm legs: the scheduler's TCP connections' smoothed RTTs sampled during the leg. */
  schedulerRttMs?: RttSummary;
  /** Lines printed under the table for this leg (for example, where its time went). */
  notes?: string[];
  /** What went wrong in a leg that ran. */
  problem?: string;
  /** Why the leg did not run at all (for example, a command not built yet). */
  skipped?: string;
}

export interface RttSummary {
  p50: number;
  p90: number;
  samples: number;
}

export interface LegSummary {
  leg: string;
  /** With `--rounds N` (N > 1): which round this run of the leg was (1-based). */
  round?: number;
  hosts: number;
  hostsFinished: number;
  hostsVerified: number;
  /** Time until the last host finished; undefined unless every host finished. */
  tLastSeconds: number | undefined;
  p50Seconds: number | undefined;
  efficiency: number | undefined;
  originRatio: number | undefined;
  /** User-mode and kernel CPU-seconds per GiB delivered (hosts x S). */
  userCpuPerGiB: number | undefined;
  kernelCpuPerGiB: number | undefined;
  cpuSource: 'cgroup' | 'proc' | undefined;
  /** The leg's processes' CPU time over the leg's wall time. */
  cpuCores: number | undefined;
  machineCores: number | undefined;
  schedulerRttMs?: RttSummary;
  /** CPU-seconds (user + kernel) per GiB delivered by role, largest first. */
  cpuPerGiBByRole?: Array<{ role: string; userPerGiB: number; kernelPerGiB: number }>;
  notes?: string[];
  problem?: string;
  skipped?: string;
}

const bytesPerSecond = (mbps: number): number => (mbps * 1e6) / 8;

/** T_lb = max(S/U, S/B, N*S/(U + N*B)). */
export function lowerBoundSeconds(setting: Setting): number {
  return fluidLowerBoundSeconds({
    totalBytes: setting.totalBytes,
    hosts: setting.hosts,
    originUploadBytesPerSecond: bytesPerSecond(setting.originMbps),
    hostDownloadBytesPerSecond: bytesPerSecond(setting.hostMbps),
    hostUploadBytesPerSecond: bytesPerSecond(setting.hostMbps),
  });
}

/** The fluid time of every host pulling from the origin: N*S through U, and S through each B. */
export function naiveFluidSeconds(setting: Setting): number {
  return Math.max(
    (setting.hosts * setting.totalBytes) / bytesPerSecond(setting.originMbps),
    setting.totalBytes / bytesPerSecond(setting.hostMbps),
  );
}

/** The p50 and p90 (nearest rank) of RTT samples, or undefined without samples. */
export function rttSummary(samplesMs: readonly number[]): RttSummary | undefined {
  if (samplesMs.length === 0) return undefined;
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const rank = (q: number): number =>
    sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0;
  return { p50: rank(0.5), p90: rank(0.9), samples: sorted.length };
}

/** The lower median (for an even count, the smaller of the middle two), or undefined when empty. */
export function median(values: readonly number[]): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

/**
 * The pipelined chain's fluid time: every byte crosses each link once at the payload rate of the
 * slowest cap, and all links run at once.
 */
export function chainFluidSeconds(setting: Setting, payloadShare: number): number {
  return setting.totalBytes / (bytesPerSecond(Math.min(setting.hostMbps, setting.originMbps)) * payloadShare);
}

export function summarizeLeg(measurement: LegMeasurement, setting: Setting): LegSummary {
  const deliveredGiB = (setting.hosts * setting.totalBytes) / 2 ** 30;
  const { cpu, wallSeconds } = measurement;
  const finished = measurement.hostSeconds.filter((s): s is number => s !== undefined);
  const allFinished = finished.length === setting.hosts && measurement.hostSeconds.length === setting.hosts;
  const tLast = allFinished ? Math.max(...finished) : undefined;
  return {
    leg: measurement.leg,
    hosts: setting.hosts,
    hostsFinished: finished.length,
    hostsVerified: measurement.hostsVerified,
    tLastSeconds: tLast,
    p50Seconds: median(finished),
    efficiency: tLast === undefined ? undefined : lowerBoundSeconds(setting) / tLast,
    originRatio:
      measurement.originBytes === undefined ? undefined : measurement.originBytes / setting.totalBytes,
    userCpuPerGiB: cpu === undefined ? undefined : cpu.userSeconds / deliveredGiB,
    kernelCpuPerGiB: cpu === undefined ? undefined : cpu.systemSeconds / deliveredGiB,
    cpuSource: cpu === undefined ? undefined : measurement.cpuSource,
    cpuCores:
      cpu === undefined || wallSeconds === undefined || wallSeconds <= 0
        ? undefined
        : (cpu.userSeconds + cpu.systemSeconds) / wallSeconds,
    machineCores: measurement.machineCores,
    ...(measurement.schedulerRttMs === undefined ? {} : { schedulerRttMs: measurement.schedulerRttMs }),
    ...(measurement.notes === undefined ? {} : { notes: measurement.notes }),
    ...(measurement.cpuByRole === undefined
      ? {}
      : {
          cpuPerGiBByRole: measurement.cpuByRole
            .map((role) => ({
              role: role.role,
              userPerGiB: role.userSeconds / deliveredGiB,
              kernelPerGiB: role.systemSeconds / deliveredGiB,
            }))
            .sort((a, b) => b.userPerGiB + b.kernelPerGiB - (a.userPerGiB + a.kernelPerGiB)),
        }),
    ...(measurement.problem === undefined ? {} : { problem: measurement.problem }),
    ...(measurement.skipped === undefined ? {} : { skipped: measurement.skipped }),
  };
}

/** Linux reports process CPU time in USER_HZ ticks, which is 100 per second on every architecture we run. */
export const CLOCK_TICKS_PER_SECOND = 100;

/** Busy CPU ticks of the whole machine from the `cpu` line of /proc/stat: all but idle and iowait. */
export function parseMachineBusyTicks(procStat: string): number | undefined {
  const fields = /^cpu\s+([\d\s]+)$/m.exec(procStat)?.[1]?.trim().split(/\s+/).map(Number);
  if (fields === undefined || fields.length < 8 || !fields.every(Number.isFinite)) return undefined;
  // user nice system idle iowait irq softirq steal; guest time is already inside user.
  const [user, nice, system, , , irq, softirq, steal] = fields as [number, ...number[]];
  return [user, nice, system, irq, softirq, steal].reduce<number>((sum, f) => sum + (f ?? 0), 0);
}

export interface ProcTicks {
  user: number;
  system: number;
  reapedChildrenUser: number;
  reapedChildrenSystem: number;
}

/**
 * From a `/proc/PID/stat` line: the process's own CPU ticks (utime, stime) and those of its
 * children it has reaped (cutime, cstime).
 */
export function parseProcStatTicks(text: string): ProcTicks | undefined {
  // The command name (field 2) is in parentheses and may hold spaces; fields after it are plain.
  const fields = text
    .slice(text.lastIndexOf(')') + 2)
    .trim()
    .split(/\s+/)
    .map(Number);
  // fields[0] is field 3 (state), so utime (field 14) is fields[11], cstime (field 17) fields[14].
  const [utime, stime, cutime, cstime] = [fields[11], fields[12], fields[13], fields[14]];
  if (utime === undefined || stime === undefined || cutime === undefined || cstime === undefined)
    return undefined;
  if (![utime, stime, cutime, cstime].every(Number.isFinite)) return undefined;
  return { user: utime, system: stime, reapedChildrenUser: cutime, reapedChildrenSystem: cstime };
}

/** A leg that ran and did not bring every host a verified copy. */
export function legFailed(summary: LegSummary): boolean {
  if (summary.skipped !== undefined) return false;
  return summary.tLastSeconds === undefined || summary.hostsVerified < summary.hosts;
}

/** `measured / predicted - 1`, e.g. 0.06 for 6 % slower than predicted. */
export function relativeError(measured: number, predicted: number): number {
  return measured / predicted - 1;
}

/** A Markdown table with padded columns. */
export function renderTable(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (values: readonly string[]): string =>
    '| ' + widths.map((w, i) => (values[i] ?? '').padEnd(w)).join(' | ') + ' |';
  return [line(header), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.map(line)];
}

export const formatOptionalSeconds = (seconds: number | undefined): string =>
  seconds === undefined ? '-' : formatSeconds(seconds);

export const formatOptionalNumber = (value: number | undefined, digits: number): string =>
  value === undefined ? '-' : value.toFixed(digits);

/** The speed the swarm should have over the BitTorrent leg (issue 15's goal). */
export const SPEEDUP_OVER_BITTORRENT_GOAL = 1.4;

/**
 * A speed ratio for the line that judges it against the goal: two decimals, unless those would read
 * as the other verdict (1.397 is not 1.40 >= 1.4); then as many as it takes, up to six.
 */
export function speedupText(speedup: number): string {
  const met = speedup >= SPEEDUP_OVER_BITTORRENT_GOAL;
  let digits = 2;
  while (digits < 6 && Number(speedup.toFixed(digits)) >= SPEEDUP_OVER_BITTORRENT_GOAL !== met) digits++;
  return speedup.toFixed(digits);
}

const cpuPerGiB = (leg: LegSummary): number | undefined =>
  leg.userCpuPerGiB === undefined || leg.kernelCpuPerGiB === undefined
    ? undefined
    : leg.userCpuPerGiB + leg.kernelCpuPerGiB;

/**
 * The swarm rows against the BitTorrent leg (speed ratio T_bt / T_swarm, CPU ratio), the chain (the
 * ceiling) and the simulator, for the legs that ran.
 */
export function comparisonLines(legs: readonly LegSummary[], simSeconds: number | undefined): string[] {
  const byName = new Map(legs.map((leg) => [leg.leg, leg]));
  const lines: string[] = [];
  for (const name of ['swarm', 'swarm-warm + copy out']) {
    const swarm = byName.get(name);
    if (swarm?.tLastSeconds === undefined) continue;
    const bittorrent = byName.get('bittorrent');
    if (bittorrent?.tLastSeconds !== undefined) {
      const speedup = bittorrent.tLastSeconds / swarm.tLastSeconds;
      const swarmCpu = cpuPerGiB(swarm);
      const bittorrentCpu = cpuPerGiB(bittorrent);
      const cpuRatio =
        swarmCpu === undefined || bittorrentCpu === undefined ? undefined : swarmCpu / bittorrentCpu;
      lines.push(
        `${name} vs bittorrent: T_bt / T_swarm = ${speedupText(speedup)} (goal >= ${SPEEDUP_OVER_BITTORRENT_GOAL}): ` +
          `${speedup >= SPEEDUP_OVER_BITTORRENT_GOAL ? 'met' : 'NOT met'}; CPU-s/GiB (user + kernel) ` +
          `${formatOptionalNumber(cpuRatio, 2)} x the BitTorrent leg's (goal <= 1)`,
      );
    }
    const floor = byName.get('node-chain');
    if (floor?.userCpuPerGiB !== undefined && swarm.userCpuPerGiB !== undefined) {
      lines.push(
        `${name} vs node-chain: user CPU-s/GiB ${swarm.userCpuPerGiB.toFixed(2)} against ${floor.userCpuPerGiB.toFixed(2)} ` +
          `for a minimal Node.js relay at the same pace (${(swarm.userCpuPerGiB / floor.userCpuPerGiB).toFixed(1)} x; ` +
          `the relay is the floor for a Node.js process here: a goal below it is out of reach for any design in Node)`,
      );
    }
    const chain = byName.get('chain');
    if (chain?.tLastSeconds !== undefined) {
      lines.push(
        `${name} vs chain: T_chain / T_swarm = ${(chain.tLastSeconds / swarm.tLastSeconds).toFixed(2)} ` +
          `(the chain is the ceiling: efficiency ${formatOptionalNumber(swarm.efficiency, 3)} against its ` +
          `${formatOptionalNumber(chain.efficiency, 3)})`,
      );
    }
  }
  for (const name of ['swarm', 'swarm-warm']) {
    const swarm = byName.get(name);
    if (swarm?.tLastSeconds === undefined || simSeconds === undefined) continue;
    const error = relativeError(swarm.tLastSeconds, simSeconds);
    lines.push(`${name} T_last vs sim: ${error >= 0 ? '+' : ''}${(error * 100).toFixed(1)} %`);
  }
  return lines;
}

/** A leg's name in tables and notes: with its round when there are several. */
export function legLabel(leg: Pick<LegSummary, 'leg' | 'round'>): string {
  return leg.round === undefined ? leg.leg : `${leg.leg} #${leg.round}`;
}

/**
 * comparisonLines for each round of a run with several (`--rounds`), then the medians over the rounds
 * of the comparison with BitTorrent (for an even count, the mean of the middle two, so that neither
 * ratio is read in its favour): one run's ratio moves with how BitTorrent's slowest host fares.
 */
export function roundsComparisonLines(legs: readonly LegSummary[], simSeconds: number | undefined): string[] {
  const rounds = [...new Set(legs.map((leg) => leg.round))];
  if (rounds.length <= 1 || rounds.includes(undefined)) return comparisonLines(legs, simSeconds);
  const lines: string[] = [];
  const speedups: number[] = [];
  const cpuRatios: number[] = [];
  for (const round of rounds) {
    const these = legs.filter((leg) => leg.round === round);
    for (const line of comparisonLines(these, simSeconds)) lines.push(`round ${round}: ${line}`);
    const swarm = these.find((leg) => leg.leg === 'swarm');
    const bittorrent = these.find((leg) => leg.leg === 'bittorrent');
    if (swarm?.tLastSeconds === undefined || bittorrent?.tLastSeconds === undefined) continue;
    speedups.push(bittorrent.tLastSeconds / swarm.tLastSeconds);
    const swarmCpu = cpuPerGiB(swarm);
    const bittorrentCpu = cpuPerGiB(bittorrent);
    if (swarmCpu !== undefined && bittorrentCpu !== undefined) cpuRatios.push(swarmCpu / bittorrentCpu);
  }
  if (speedups.length > 1) {
    const speedup = middle(speedups);
    const list = (values: number[]): string => values.map((value) => value.toFixed(2)).join(', ');
    lines.push(
      `swarm vs bittorrent over ${speedups.length} rounds: T_bt / T_swarm median ${speedupText(speedup)} (${list(speedups)}; ` +
        `goal >= ${SPEEDUP_OVER_BITTORRENT_GOAL}): ${speedup >= SPEEDUP_OVER_BITTORRENT_GOAL ? 'met' : 'NOT met'}` +
        (cpuRatios.length === 0
          ? ''
          : `; CPU x BitTorrent's median ${middle(cpuRatios).toFixed(2)} (${list(cpuRatios)}; goal <= 1)`),
    );
  }
  return lines;
}

/** The median of a non-empty list: the middle value, or the mean of the middle two. */
function middle(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const half = Math.floor(sorted.length / 2);
  const upper = sorted[half] ?? 0;
  return sorted.length % 2 === 1 ? upper : ((sorted[half - 1] ?? upper) + upper) / 2;
}

/** One host of the user flow: when its agent listened, and what its pull reported. */
export interface UserFlowPhases {
  /** From the clock's start until the agent printed its listening line. */
  agentStartSeconds: number;
  /** From the clock's start until the pull started: agentStartSeconds, or 0 (`--pull-start launch`). */
  pullStartSeconds: number;
  /** From the pull's own start until its agent held the model (`agent-complete`), when reported. */
  swarmSeconds: number | undefined;
  /** The host's T (until the pull exited 0), when it finished. */
  totalSeconds: number | undefined;
}

const spread = (values: readonly number[]): string => {
  if (values.length === 0) return '-';
  const sorted = [...values].sort((a, b) => a - b);
  const p50 = median(sorted) ?? 0;
  return `${(sorted[0] ?? 0).toFixed(2)} / ${p50.toFixed(2)} / ${(sorted[sorted.length - 1] ?? 0).toFixed(2)} s`;
};

/**
 * Where the user flow's time went, over the hosts (min / p50 / max): the agent's start-up, the
 * swarm (the pull asking its agent until the agent holds the model) and the rest (the pull's own
 * start-up and the copy to the destination).
 */
export function userFlowPhasesLine(phases: readonly UserFlowPhases[]): string {
  const swarm = phases.flatMap((phase) => (phase.swarmSeconds === undefined ? [] : [phase.swarmSeconds]));
  const rest = phases.flatMap((phase) =>
    phase.swarmSeconds === undefined || phase.totalSeconds === undefined
      ? []
      : [phase.totalSeconds - phase.pullStartSeconds - phase.swarmSeconds],
  );
  return (
    `per host (min / p50 / max): agent start-up to listening ${spread(phases.map((phase) => phase.agentStartSeconds))}; ` +
    `pull until its agent holds the model ${spread(swarm)}; pull start-up + copy out ${spread(rest)}`
  );
}

/** `agents 6.10 + 4.02, pulls 3.2 + 2.1, ...`: user + kernel CPU-s per GiB by role. */
export function cpuByRoleLine(roles: NonNullable<LegSummary['cpuPerGiBByRole']>): string {
  return roles
    .map((role) => `${role.role} ${role.userPerGiB.toFixed(2)} + ${role.kernelPerGiB.toFixed(2)}`)
    .join(', ');
}

/** CPU since the clock at one moment of a leg's start: per role (user + kernel s), and the machine's busy s. */
export interface StartReading {
  atSeconds: number;
  roles: ReadonlyMap<string, number>;
  machineBusySeconds?: number;
}

/**
 * The start-up table: for each window between readings (the first from the clock), the CPU-ms each
 * role used in it, and how many of the machine's `cores` were busy over it (all of its work, ours
 * or not). Where the cores are all busy, the processes' start waits for CPU, not for the network.
 */
export function startCpuLines(readings: readonly StartReading[], cores: number): string[] {
  if (readings.length === 0) return [];
  const roles = [...new Set(readings.flatMap((reading) => [...reading.roles.keys()]))];
  const rows: string[][] = [];
  let previous: StartReading = { atSeconds: 0, roles: new Map(), machineBusySeconds: 0 };
  for (const reading of readings) {
    const span = reading.atSeconds - previous.atSeconds;
    const busy =
      reading.machineBusySeconds === undefined || previous.machineBusySeconds === undefined || span <= 0
        ? '-'
        : `${((reading.machineBusySeconds - previous.machineBusySeconds) / span).toFixed(2)} of ${cores}`;
    // A role missing from a reading used nothing since the one before (its total carries over).
    const totals = new Map(
      roles.map((role) => [role, reading.roles.get(role) ?? previous.roles.get(role) ?? 0]),
    );
    rows.push([
      `${previous.atSeconds.toFixed(2)}-${reading.atSeconds.toFixed(2)} s`,
      ...roles.map((role) => (((totals.get(role) ?? 0) - (previous.roles.get(role) ?? 0)) * 1000).toFixed(0)),
      busy,
    ]);
    previous = { ...reading, roles: totals };
  }
  return textTable(
    ['from the clock', ...roles.map((role) => `${role} CPU-ms`), 'cores busy'],
    rows,
    roles.map((_, index) => index + 1),
  );
}
