/** `weightcast sim`: the swarm scheduling core in the deterministic simulator, against the fluid bound. */

import { simulate, type SimOptions, type SimResult } from '../../sim/simulate.js';
import { autoChainMembersMax } from '../../swarm/core/ring-plan.js';
import { formatBytes, formatSeconds, parsePositiveInt } from '../../util/units.js';
import { parseHedgeTail, parseRingParents } from '../swarm-flags.js';
import { EXIT_FAILURE, reportError, type CliIo } from '../io.js';
import { WeightcastError } from '../../errors.js';

export interface SimFlags {
  hosts: string;
  sizeGb: string;
  pieceMb: string;
  hostMbps: string;
  originMbps: string;
  racks: string;
  rackUplinkMbps?: string;
  latencyMs: string;
  failHosts: string;
  liars: string;
  corruptHosts: string;
  schedulerLossS?: string;
  seed: string;
  downloads: string;
  uploads: string;
  originReaders: string;
  hedgeTail: string;
  ringParents: string;
  ringPush?: boolean;
  ringChain?: boolean;
  perPiece?: boolean;
  ringMembers?: string;
  ringStoreForward?: boolean;
  json?: boolean;
}

function numberFlag(text: string, what: string, minimum: number): number {
  const value = Number(text);
  if (!Number.isFinite(value) || value < minimum) {
    throw new WeightcastError('USAGE', `${what} must be a number >= ${minimum}, got ${JSON.stringify(text)}`);
  }
  return value;
}

function hostCountFlag(text: string, what: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isInteger(value) || value < 0) {
    throw new WeightcastError(
      'USAGE',
      `${what} must be a whole number of hosts, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}

export function parseSimFlags(flags: SimFlags): SimOptions {
  const hosts = parsePositiveInt(flags.hosts, '--hosts');
  const hostBytesPerSecond = (numberFlag(flags.hostMbps, '--host-mbps', 1) * 1e6) / 8;
  const originBytesPerSecond = (numberFlag(flags.originMbps, '--origin-mbps', 1) * 1e6) / 8;
  const downloadsPerHost = parsePositiveInt(flags.downloads, '--downloads');
  const options: SimOptions = {
    hosts,
    totalBytes: Math.round(numberFlag(flags.sizeGb, '--size-gb', 1e-6) * 1e9),
    pieceBytes: Math.round(numberFlag(flags.pieceMb, '--piece-mb', 1 / 64) * 1024 * 1024),
    hostBytesPerSecond,
    originBytesPerSecond,
    racks: numberFlag(flags.racks, '--racks', 0),
    rackUplinkBytesPerSecond:
      flags.rackUplinkMbps === undefined
        ? 0
        : (numberFlag(flags.rackUplinkMbps, '--rack-uplink-mbps', 1) * 1e6) / 8,
    latencyMs: numberFlag(flags.latencyMs, '--latency-ms', 0),
    failHosts: hostCountFlag(flags.failHosts, '--fail-hosts'),
    liarHosts: hostCountFlag(flags.liars, '--liars'),
    corruptHosts: hostCountFlag(flags.corruptHosts, '--corrupt-hosts'),
    seed: numberFlag(flags.seed, '--seed', 0),
    downloadsPerHost,
    uploadsPerHost: parsePositiveInt(flags.uploads, '--uploads'),
    originReaders: parsePositiveInt(flags.originReaders, '--origin-readers'),
    hedgeTailPieces: parseHedgeTail(flags.hedgeTail),
    ringParents: parseRingParents(flags.ringParents),
    ...(flags.ringPush === true || flags.ringChain === true ? { ringPush: true } : {}),
    ...(flags.ringChain === true ? { ringChain: true } : {}),
    ...(flags.ringMembers === undefined
      ? {}
      : { ringMembersMax: parsePositiveInt(flags.ringMembers, '--ring-members') }),
    ...(flags.ringStoreForward === true ? { ringStoreForward: true } : {}),
    ...(flags.schedulerLossS === undefined
      ? {}
      : { schedulerLossAtMs: numberFlag(flags.schedulerLossS, '--scheduler-loss-s', 0) * 1000 }),
  };
  if (flags.perPiece === true && options.ringPush === true)
    throw new WeightcastError(
      'USAGE',
      '--per-piece plans without rings or chains: drop --ring-push and --ring-chain',
    );
  // The scheduler's default: one chain while the swarm is short enough for the model
  // (autoChainMembersMax); the hosts here all join at the start. Adversaries are simulated per
  // piece only, so they keep it per piece.
  const chainMembersMax = autoChainMembersMax(options.totalBytes);
  if (
    flags.perPiece !== true &&
    options.ringPush !== true &&
    hosts >= 2 &&
    hosts <= chainMembersMax &&
    (options.liarHosts ?? 0) === 0 &&
    (options.corruptHosts ?? 0) === 0
  ) {
    options.ringPush = true;
    options.ringChain = true;
  }
  if (options.failHosts >= hosts)
    throw new WeightcastError('USAGE', '--fail-hosts must leave at least one host');
  if (options.failHosts + (options.liarHosts ?? 0) + (options.corruptHosts ?? 0) >= hosts)
    throw new WeightcastError('USAGE', '--fail-hosts, --liars and --corrupt-hosts must leave an honest host');
  if (options.ringPush === true && ((options.liarHosts ?? 0) > 0 || (options.corruptHosts ?? 0) > 0))
    throw new WeightcastError(
      'USAGE',
      '--ring-push and --ring-chain do not simulate --liars or --corrupt-hosts yet',
    );
  if (
    options.ringPush !== true &&
    (options.ringMembersMax !== undefined || options.ringStoreForward === true)
  )
    throw new WeightcastError(
      'USAGE',
      '--ring-members and --ring-store-forward are ring mode’s: add --ring-push or --ring-chain',
    );
  if (options.ringMembersMax !== undefined && options.ringMembersMax < 2)
    throw new WeightcastError('USAGE', '--ring-members must be at least 2');
  if (Math.ceil(options.totalBytes / options.pieceBytes) > 10_000_000) {
    throw new WeightcastError('USAGE', 'more than 10,000,000 pieces: raise --piece-mb');
  }
  return options;
}

export function simCommand(flags: SimFlags, io: CliIo): number {
  const json = flags.json === true;
  try {
    const options = parseSimFlags(flags);
    const started = performance.now();
    const result = simulate(options);
    const wallSeconds = (performance.now() - started) / 1000;
    if (json) io.stdout(JSON.stringify({ event: 'sim', options, ...result, wallSeconds }) + '\n');
    else io.stdout(describe(options, result, wallSeconds));
    return result.incomplete ? EXIT_FAILURE : 0;
  } catch (error) {
    return reportError(io, error, json);
  }
}

function describe(options: SimOptions, result: SimResult, wallSeconds: number): string {
  const pieces = Math.ceil(options.totalBytes / options.pieceBytes);
  const lines = [
    `swarm: ${options.hosts} hosts, ${formatBytes(options.totalBytes)} in ${pieces} pieces of ${formatBytes(options.pieceBytes)}, seed ${options.seed}`,
    `links: hosts ${((options.hostBytesPerSecond * 8) / 1e6).toFixed(0)} Mbit/s, origin ${((options.originBytesPerSecond * 8) / 1e6).toFixed(0)} Mbit/s` +
      (options.racks > 0 ? `, ${options.racks} racks` : '') +
      (options.rackUplinkBytesPerSecond > 0
        ? ` with ${((options.rackUplinkBytesPerSecond * 8) / 1e6).toFixed(0)} Mbit/s uplinks`
        : ''),
    `plan          ${options.ringChain === true ? 'one chain' : options.ringPush === true ? 'rings' : 'per piece'}`,
    `T_last        ${formatSeconds(result.tLastMs / 1000)}${result.incomplete ? '  (INCOMPLETE: not every host finished)' : ''}`,
    `T_lb          ${formatSeconds(result.tLowerBoundMs / 1000)}`,
    `efficiency    ${result.efficiency.toFixed(3)}`,
    `origin / S    ${result.originRatio.toFixed(3)} (origin done at ${formatSeconds(result.originDoneMs / 1000)})`,
    `p50 / p99     ${formatSeconds(result.p50Ms / 1000)} / ${formatSeconds(result.p99Ms / 1000)}`,
    `hosts         ${result.hostsCompleted} completed, ${result.hostsFailed} failed` +
      (result.adversaries > 0 ? ` (honest hosts; ${result.adversaries} adversaries not counted)` : ''),
    ...(result.adversaries === 0
      ? []
      : [
          `blame         ${result.corruptTransfers} transfers reported corrupt, ${result.rechecks} re-checked by a third host; adversaries caught ${result.adversariesCaught}/${result.adversaries}; honest hosts banned ${result.honestBanned}, demoted ${result.honestDemoted}`,
        ]),
    ...(options.schedulerLossAtMs === undefined
      ? []
      : [
          `fallback      scheduler gone at ${formatSeconds(options.schedulerLossAtMs / 1000)}: ${result.fallbackTransfers} transfers the hosts chose themselves, ${result.fallbackBusy} refused as busy`,
        ]),
    ...(options.ringPush === true
      ? [
          `ring          ${result.pushes} pieces pushed along the ring; ${result.ringCuts} links cut as stalled`,
        ]
      : []),
    `simulated     ${result.transfers} transfers in ${result.ticks} ticks of ${result.tickMs.toFixed(3)} ms; ${formatSeconds(wallSeconds)} of wall time`,
  ];
  return lines.join('\n') + '\n';
}
