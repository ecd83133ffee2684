/**
 * Drives a SwarmCore in memory for tests: hosts are added with known piece maps, assignments are
 * collected, and transfers complete "instantly" in an order drawn from the test's own seeded
 * generator (so every failure replays from the seed printed in its message).
 */

import { Random } from '../../src/swarm/core/random.js';
import { SwarmCore } from '../../src/swarm/core/swarm-core.js';
import type { Assignment, HostSpec, SwarmConfig, TransferOutcome } from '../../src/swarm/core/types.js';

export const PIECE_BYTES = 1024;

export function makeConfig(overrides: Partial<SwarmConfig> = {}): SwarmConfig {
  const pieceCount = overrides.pieceCount ?? 64;
  return {
    pieceCount,
    pieceBytes: PIECE_BYTES,
    totalBytes: pieceCount * PIECE_BYTES,
    originUploadBytesPerSecond: 1e9,
    originReadersMax: 4,
    downloadsPerHostMax: 4,
    uploadsPerHostMax: 4,
    hedgeTailPieces: 0,
    randomSeed: 1,
    ...overrides,
  };
}

export function hostSpec(id: number, overrides: Partial<HostSpec> = {}): HostSpec {
  return { id, uploadBytesPerSecond: 1e8, downloadBytesPerSecond: 1e8, ...overrides };
}

export function range(from: number, to: number): number[] {
  const out: number[] = [];
  for (let i = from; i < to; i++) out.push(i);
  return out;
}

export class Driver {
  readonly core: SwarmCore;
  /** Transfers assigned and not yet reported, in assignment order. */
  readonly inFlight: Assignment[] = [];
  /** Every assignment ever made, in order. */
  readonly log: Assignment[] = [];
  readonly random: Random;
  nowMs = 0;

  constructor(config: SwarmConfig, driverSeed = 7) {
    this.core = new SwarmCore(config);
    this.random = new Random(driverSeed);
  }

  add(spec: HostSpec, held?: Iterable<number>): void {
    this.core.addHost(this.nowMs, spec, held);
  }

  /** Polls the core and records what it assigned; cancellations are reported back at once. */
  poll(): Assignment[] {
    const assigned = this.core.pollAssignments(this.nowMs);
    for (const assignment of assigned) {
      this.inFlight.push(assignment);
      this.log.push(assignment);
    }
    for (const id of this.core.pollCancellations()) this.report(id, 'cancelled');
    return assigned;
  }

  /** Reports one in-flight transfer and removes it from the in-flight list. */
  report(transferId: number, outcome: TransferOutcome, bytesPerSecond?: number): void {
    const index = this.inFlight.findIndex((a) => a.transferId === transferId);
    if (index >= 0) this.inFlight.splice(index, 1);
    this.nowMs += 1;
    this.core.handleTransfer(
      this.nowMs,
      bytesPerSecond === undefined ? { transferId, outcome } : { transferId, outcome, bytesPerSecond },
    );
  }

  /** Completes one in-flight transfer chosen at random as verified, then polls. */
  step(): Assignment | undefined {
    if (this.inFlight.length === 0) {
      const next = this.core.pollTimeout();
      if (next === undefined) return undefined;
      this.nowMs = Math.max(this.nowMs, next);
      this.core.handleTimeout(this.nowMs);
      this.poll();
      return this.inFlight.length === 0 ? undefined : this.step();
    }
    const done = this.inFlight[this.random.below(this.inFlight.length)]!;
    this.report(done.transferId, 'verified');
    this.poll();
    return done;
  }

  /** Steps until every listed host is complete; returns the number of steps, or -1 if it stalled. */
  runUntilComplete(hosts: readonly number[], stepsMax = 1_000_000): number {
    this.poll();
    for (let steps = 0; steps < stepsMax; steps++) {
      if (hosts.every((host) => this.core.isComplete(host))) return steps;
      if (this.step() === undefined) return -1;
    }
    return -1;
  }

  /** Drops the in-flight transfers that involve `host` (removeHost says they will not be reported). */
  removeHost(host: number): Assignment[] {
    const dropped = this.inFlight.filter((a) => a.host === host || a.from === host);
    for (const a of dropped) this.inFlight.splice(this.inFlight.indexOf(a), 1);
    this.core.removeHost(this.nowMs, host);
    return dropped;
  }
}
