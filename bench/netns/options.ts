/**
 * `npm run bench:fanout`'s flags, parsed without side effects so they can be tested: which legs run,
 * the testbed's setting (hosts, caps, MTU) and where the scheduler sits. `fanout.ts` owns what the
 * legs do; this module owns what the user asked for.
 */

import { parseArgs } from 'node:util';
import { parseHedgeTail, parseRingParents, parseTransferUnit } from '../../src/cli/swarm-flags.js';
import { RING_PARENTS_DEFAULT } from '../../src/swarm/core/index.js';
import { SWARM_SERVICE_DEFAULTS } from '../../src/swarm/scheduler/defaults.js';
import { parseNodeExtraCa, type NodeExtraCa } from './node-start.js';
import { BenchUsageError as UsageError, flagNumber } from '../bench-args.js';
import { NGINX_INSTALL_HINT } from './commands.js';
import { HOSTS_MAX, MBPS_MAX, MBPS_MIN, MTU_DEFAULT, MTU_MAX, MTU_MIN } from './plan.js';

const MiB = 1024 * 1024;

/**
 * Every leg, in the order a run measures them. `swarm` is the user's flow with cold agents;
 * `swarm-warm` is the older measurement (long-running agents, warmed up, asked through their local
 * API, then `pull --agent` copies out); `bittorrent` and `chain` are the baseline and the ceiling.
 */
export const LEGS = [
  'naive',
  'swarm',
  'swarm-warm',
  'bittorrent',
  'chain',
  'node-chain',
  'store-chain',
  'store-ring',
] as const;
export type Leg = (typeof LEGS)[number];
/** At most this many rounds: each takes minutes. */
const ROUNDS_MAX = 20;
export const LEGS_DEFAULT: readonly Leg[] = ['naive', 'swarm', 'bittorrent', 'chain', 'node-chain'];

/** Where the scheduler runs: on the origin's host (as it usually is deployed) or a machine of its own. */
export const SCHEDULER_PLACES = ['origin', 'control'] as const;
export type SchedulerPlace = (typeof SCHEDULER_PLACES)[number];

/**
 * The origin's HTTP server: nginx (what the issue's measurements and most users' origins run;
 * `sendfile`, one worker) or weightcast's own file server (`weightcast serve`). `auto`: nginx on the
 * netns testbed when it is installed, else weightcast's server, which alone can cap its own rate on
 * loopback. Its CPU counts in every leg that reads it (as the origin's role).
 */
export const ORIGIN_SERVERS = ['auto', 'nginx', 'weightcast'] as const;
export type OriginServer = (typeof ORIGIN_SERVERS)[number];
/** The server `auto` resolved to (resolveOriginServer). */
export type OriginServerKind = Exclude<OriginServer, 'auto'>;

/** How reports name the origin's server. */
export function originServerLabel(server: OriginServerKind): string {
  return server === 'nginx' ? 'nginx' : 'weightcast serve';
}

/**
 * When the swarm leg's pulls start: once their agent prints its listening line (the default), or at
 * the clock's start together with the agent (`weightcast agent & weightcast pull ...`: the pull waits
 * for an agent that is still starting).
 */
export const PULL_STARTS = ['listening', 'launch'] as const;
export type PullStart = (typeof PULL_STARTS)[number];

export interface Options {
  hosts: number;
  sizeMb: number;
  mbps: number;
  originMbps: number;
  /** Undefined: the manifest's default for the model's size (defaultPieceSize). */
  pieceMb: number | undefined;
  originReaders: number | undefined;
  legs: Leg[];
  /** Times every leg runs, the legs alternating (BitTorrent's time moves by seconds between runs). */
  rounds: number;
  work: string;
  loopback: boolean;
  keep: boolean;
  json: boolean;
  /** swarm-warm: skip the pull --agent copy-out (profiling the swarm alone); the agents' caches are verified instead. */
  skipCopyOut: boolean;
  /** swarm-warm: size of the model the agents fetch first, unmeasured (0: none). */
  warmUpMb: number;
  /** Ring pairings (SwarmConfig.ringParents) for the scheduler and the simulator (0: off). */
  ringParents: number;
  /** Pieces each host downloads and uploads at once (scheduler and simulator); undefined: their default. */
  downloads: number | undefined;
  uploads: number | undefined;
  /** Hedged tail pieces per host (scheduler and simulator); undefined: their default. */
  hedgeTail: number | undefined;
  /** Ring mode (`--ring-push`) for the scheduler and the simulator; `--ring-chain` for chains. */
  ringPush: boolean;
  ringChain: boolean;
  /** `--per-piece` for the scheduler and the simulator (their default: a chain while it is short enough). */
  perPiece: boolean;
  /** Pieces per transfer unit (`--transfer-unit`); undefined: the scheduler's own choice. */
  transferUnit: number | undefined;
  /** The testbed links' MTU (netns only). */
  mtu: number;
  schedulerOn: SchedulerPlace;
  /** The origin's HTTP server (OriginServer). */
  originServer: OriginServer;
  /** swarm: when each host's pull starts (PullStart). */
  pullStart: PullStart;
  /** Whether the legs' processes inherit NODE_EXTRA_CA_CERTS when it is set (node-start.ts). */
  nodeExtraCa: NodeExtraCa;
}

/** A flag the benchmark refuses: the one kind every benchmark command reports (bench-args.ts). */
export { UsageError };

/**
 * A benchmark's flags, parsed: its options, or the exit code once the help (0) or a usage error
 * (2, with the usage) is printed. `isUsageError` tells the benchmark's own usage errors.
 */
export function optionsOrExitCode<T>(
  parse: () => T | 'help',
  usage: string,
  name: string,
  isUsageError: (error: unknown) => boolean,
): T | { exitCode: number } {
  try {
    const parsed = parse();
    if (parsed !== 'help') return parsed;
    process.stdout.write(`${usage}\n`);
    return { exitCode: 0 };
  } catch (error) {
    if (!isUsageError(error) && !(error instanceof TypeError)) throw error;
    process.stderr.write(`${name}: ${(error as Error).message}\n${usage}\n`);
    return { exitCode: 2 };
  }
}

export const USAGE = [
  'usage: npm run bench:fanout -- [flags]',
  '  --hosts N (8)  --size-mb S (256)  --mbps B (200)  --origin-mbps U (B)',
  `  --mtu M (${MTU_DEFAULT}; 9000 for jumbo frames; netns testbed only)`,
  "  --piece-mb P (the manifest's default for the model's size: 0.5 at 256 MiB; 0.25 is 256 KiB)",
  '  --scheduler-on origin|control (origin: beside the origin on its host and link; control: a machine of its own)',
  '  --origin-server auto|nginx|weightcast (auto: nginx on the netns testbed when installed, else `weightcast serve`)',
  "  --origin-readers K  --ring-parents K (the scheduler's defaults; the simulator is given the same)",
  "  --downloads K  --uploads K (pieces per host at once; the scheduler's default)",
  "  --hedge-tail N (each host's last N pieces may be hedged; the scheduler's default)",
  '  --per-piece, --ring-push, --ring-chain (how the scheduler and the simulator plan: per piece, rings, always one chain; default theirs: one chain while it is short enough for the model)',
  "  --transfer-unit N|auto (pieces per transfer; auto: the scheduler's choice, the simulator moves units as pieces)",
  `  --legs L,L,... (${LEGS_DEFAULT.join(',')}; all: ${LEGS.join(',')})`,
  '      naive: every host pulls from the origin; swarm: the user flow, each host starting `weightcast agent`',
  '      when the clock starts and `weightcast pull --agent` once it listens; swarm-warm: warmed-up agents',
  '      asked through their local API, then `pull --agent` copies out; bittorrent: aria2c + opentracker;',
  "      chain: socat + tee relay; node-chain: the same with a minimal Node.js relay (Node's CPU floor);",
  "      store-chain: the node-chain keeping pieces as an agent does (the piece store's cost at the links' pace);",
  '      store-ring: the ring all-gather proposed for healthy swarms, built from the piece store alone',
  "  --rounds N (1; every leg N times, alternating: each round's rows, then the medians of the comparisons)",
  '  --pull-start listening|launch (listening; swarm: each pull starts once its agent listens, or with it)',
  '  --warm (adds swarm-warm to the legs)  --skip-copy-out  --warm-up-mb M (64) (swarm-warm only)',
  '  --node-extra-ca-certs inherit|unset (inherit; where the environment sets NODE_EXTRA_CA_CERTS, which Node',
  '      loads at every process start: unset runs every process of the legs without it, to report beside)',
  '  --work DIR (the temp dir)  --loopback  --keep  --json',
].join('\n');

export function parseOptions(argv: readonly string[], defaultWork: string): Options | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      hosts: { type: 'string', default: '8' },
      'size-mb': { type: 'string', default: '256' },
      mbps: { type: 'string', default: '200' },
      'origin-mbps': { type: 'string' },
      'piece-mb': { type: 'string' },
      'origin-readers': { type: 'string' },
      legs: { type: 'string', default: LEGS_DEFAULT.join(',') },
      rounds: { type: 'string', default: '1' },
      warm: { type: 'boolean', default: false },
      work: { type: 'string', default: defaultWork },
      loopback: { type: 'boolean', default: false },
      keep: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      'skip-copy-out': { type: 'boolean', default: false },
      'warm-up-mb': { type: 'string', default: '64' },
      mtu: { type: 'string', default: String(MTU_DEFAULT) },
      'scheduler-on': { type: 'string', default: 'origin' },
      'origin-server': { type: 'string', default: 'auto' },
      'pull-start': { type: 'string', default: 'listening' },
      'node-extra-ca-certs': { type: 'string', default: 'inherit' },
      'ring-parents': { type: 'string', default: String(RING_PARENTS_DEFAULT) },
      downloads: { type: 'string' },
      uploads: { type: 'string' },
      'hedge-tail': { type: 'string' },
      'ring-push': { type: 'boolean', default: false },
      'ring-chain': { type: 'boolean', default: false },
      'per-piece': { type: 'boolean', default: false },
      'transfer-unit': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const mbps = number(values.mbps, '--mbps', MBPS_MIN, MBPS_MAX);
  const schedulerOn = oneOf(SCHEDULER_PLACES, values['scheduler-on'], '--scheduler-on');
  const pullStart = oneOf(PULL_STARTS, values['pull-start'], '--pull-start');
  const originServer = oneOf(ORIGIN_SERVERS, values['origin-server'], '--origin-server');
  if (originServer === 'nginx' && values.loopback) {
    throw new UsageError(
      '--origin-server nginx needs the netns testbed: on loopback only weightcast serve caps the origin',
    );
  }
  const legs = parseLegs(values.legs, values.warm);
  if (values['skip-copy-out'] && !legs.includes('swarm-warm')) {
    // The swarm leg is the user's flow now: its copy-out is part of what it measures.
    throw new UsageError(
      "--skip-copy-out applies to the warm agents' leg: use --legs swarm-warm --skip-copy-out (or add --warm)",
    );
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
    legs,
    rounds: integer(values.rounds, '--rounds', 1, ROUNDS_MAX),
    work: values.work,
    loopback: values.loopback,
    keep: values.keep,
    json: values.json,
    skipCopyOut: values['skip-copy-out'],
    warmUpMb: integer(values['warm-up-mb'], '--warm-up-mb', 0, 4096),
    mtu: integer(values.mtu, '--mtu', MTU_MIN, MTU_MAX),
    schedulerOn,
    originServer,
    pullStart,
    nodeExtraCa: parseNodeExtraCa(values['node-extra-ca-certs']),
    ringParents: parseRingParents(values['ring-parents']),
    downloads: values.downloads === undefined ? undefined : integer(values.downloads, '--downloads', 1, 64),
    uploads: values.uploads === undefined ? undefined : integer(values.uploads, '--uploads', 1, 64),
    hedgeTail: values['hedge-tail'] === undefined ? undefined : parseHedgeTail(values['hedge-tail']),
    ringPush: values['ring-push'] === true || values['ring-chain'] === true,
    ringChain: values['ring-chain'] === true,
    perPiece: values['per-piece'] === true,
    transferUnit: transferUnit(values['transfer-unit']),
  };
}

/** `value` when it is one of `choices`, else a usage error naming `flag`. */
function oneOf<T extends string>(choices: readonly T[], value: string, flag: string): T {
  if (!(choices as readonly string[]).includes(value)) {
    throw new UsageError(`${flag} must be ${choices.join(' or ')}, got ${value}`);
  }
  return value as T;
}

/** The legs named, each once, in the run's order (LEGS); `--warm` adds swarm-warm. */
export function parseLegs(text: string, warm: boolean): Leg[] {
  const named = text
    .split(',')
    .map((leg) => leg.trim())
    .filter((leg) => leg !== '');
  for (const leg of named) {
    if (!(LEGS as readonly string[]).includes(leg)) throw new UsageError(`--legs: unknown leg ${leg}`);
  }
  if (warm) named.push('swarm-warm');
  if (named.length === 0) throw new UsageError('--legs: no leg named');
  return LEGS.filter((leg) => named.includes(leg));
}

/**
 * The origin readers the scheduler and the simulator are both given: the flag's value, else the
 * scheduler's default. Without it the simulator would pick its own (enough transfers to fill the
 * origin's link at a fair per-flow share: 8 on the default testbed) and predict another swarm
 * than the one measured.
 */
export function originReadersFlags(options: Pick<Options, 'originReaders'>): string[] {
  return ['--origin-readers', String(options.originReaders ?? SWARM_SERVICE_DEFAULTS.originReaders)];
}

/** `--downloads`, `--uploads`, `--hedge-tail` and `--ring-push` as given, for the scheduler and the simulator alike. */
export function schedulingFlags(options: Options): string[] {
  return [
    ...(options.ringPush ? ['--ring-push'] : []),
    ...(options.ringChain ? ['--ring-chain'] : []),
    ...(options.perPiece ? ['--per-piece'] : []),
    ...(options.downloads === undefined ? [] : ['--downloads', String(options.downloads)]),
    ...(options.uploads === undefined ? [] : ['--uploads', String(options.uploads)]),
    ...(options.hedgeTail === undefined ? [] : ['--hedge-tail', String(options.hedgeTail)]),
  ];
}

/** `--transfer-unit` as given, for the scheduler only (the simulator is given the unit's bytes as its piece size). */
export function transferUnitFlags(options: Pick<Options, 'transferUnit'>): string[] {
  return options.transferUnit === undefined ? [] : ['--transfer-unit', String(options.transferUnit)];
}

function transferUnit(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  try {
    return parseTransferUnit(text);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

function number(text: string, what: string, min: number, max: number): number {
  return flagNumber(text, what, min, { min, max });
}

/** Piece size in MiB: 1/16 (64 KiB, the manifest's smallest) to 1024, a whole number of bytes. */
function pieceMb(text: string): number {
  const value = number(text, '--piece-mb', 1 / 16, 1024);
  if (!Number.isInteger(value * MiB))
    throw new UsageError(`--piece-mb must be a whole number of bytes, got ${text}`);
  return value;
}

function integer(text: string, what: string, min: number, max: number): number {
  return flagNumber(text, what, min, { min, max, integer: true });
}

/**
 * Which HTTP server the origin runs (`--origin-server`): `auto` is nginx on the netns testbed when it
 * is installed, else weightcast's own file server; or why the one asked for cannot run.
 */
export function resolveOriginServer(
  asked: OriginServer,
  mode: 'netns' | 'loopback',
  nginxInstalled: boolean,
): { server: OriginServerKind } | { problem: string } {
  if (asked === 'weightcast') return { server: 'weightcast' };
  if (asked === 'auto') return { server: mode === 'netns' && nginxInstalled ? 'nginx' : 'weightcast' };
  if (mode !== 'netns') return { problem: '--origin-server nginx needs the netns testbed' };
  if (!nginxInstalled)
    return { problem: `--origin-server nginx: nginx is not installed (${NGINX_INSTALL_HINT})` };
  return { server: 'nginx' };
}
