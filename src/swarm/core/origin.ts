/**
 * Origin policy: the origin sends first copies only. It serves a piece while no host holds it, to at
 * most `originReadersMax` transfers at once, never the same piece to two transfers at once (a hedge
 * is the one exception), and to at most a few transfers per host so first copies land on many hosts
 * and the swarm fans them out at once. Together these make the origin send each byte about once.
 *
 * Pieces no host holds are bucket 0 of the rarity index; this module picks among them at random
 * and counts what is in flight from the origin per piece and per host.
 */

import { hasBit } from './bitfield.js';
import type { Random } from './random.js';
import type { RarityIndex } from './rarity.js';

/** Random probes into bucket 0 before falling back to a bounded scan of it. */
const PROBES = 8;
/** At most this many bucket-0 entries are scanned for one pick. */
const SCAN_MAX = 4096;

export class OriginPolicy {
  readonly readersMax: number;
  active = 0;
  /** Origin transfers in flight per piece (a hedge can make it 2). */
  private readonly pieceInFlight: Uint8Array;
  /** Distinct pieces with an origin transfer in flight. */
  private piecesInFlight = 0;
  private perHost = new Int32Array(0);
  private readonly perHostOverride: number | undefined;

  constructor(pieceCount: number, readersMax: number, perHostMax: number | undefined) {
    this.readersMax = readersMax;
    this.pieceInFlight = new Uint8Array(pieceCount);
    this.perHostOverride = perHostMax;
  }

  ensureHosts(hostCount: number): void {
    if (hostCount <= this.perHost.length) return;
    const grown = new Int32Array(Math.max(hostCount, this.perHost.length * 2));
    grown.set(this.perHost);
    this.perHost = grown;
  }

  /**
   * Origin transfers one host may have at once: one when there are at least as many hosts
   * downloading as readers (first copies then land on as many hosts as possible), more when there
   * are few hosts, so the origin is still kept busy.
   */
  perHostMax(hostsDownloading: number, downloadsPerHostMax: number): number {
    if (this.perHostOverride !== undefined) return this.perHostOverride;
    const share = Math.ceil(this.readersMax / Math.max(1, hostsDownloading));
    return Math.max(1, Math.min(share, downloadsPerHostMax));
  }

  transfersTo(host: number): number {
    return this.perHost[host]!;
  }

  hasFreeReader(): boolean {
    return this.active < this.readersMax;
  }

  /** True when some piece no host holds is not already coming from the origin. */
  hasUnserved(rarity: RarityIndex): boolean {
    return rarity.heldNowhere > this.piecesInFlight;
  }

  inFlight(piece: number): number {
    return this.pieceInFlight[piece]!;
  }

  /**
   * A random piece no host holds, not in flight from the origin, and not held by `host` (a banned
   * host's own pieces are not counted as copies); -1 when none is found.
   */
  pickUnserved(rarity: RarityIndex, random: Random, held: Uint32Array): number {
    const size = rarity.heldNowhere;
    if (size === 0) return -1;
    for (let probe = 0; probe < PROBES; probe++) {
      const piece = rarity.order[random.below(size)]!;
      if (this.pieceInFlight[piece] === 0 && !hasBit(held, piece)) return piece;
    }
    const start = random.below(size);
    const steps = Math.min(size, SCAN_MAX);
    for (let step = 0; step < steps; step++) {
      const piece = rarity.order[(start + step) % size]!;
      if (this.pieceInFlight[piece] === 0 && !hasBit(held, piece)) return piece;
    }
    return -1;
  }

  start(host: number, piece: number): void {
    this.active++;
    this.perHost[host]!++;
    if (this.pieceInFlight[piece]!++ === 0) this.piecesInFlight++;
  }

  finish(host: number, piece: number): void {
    this.active--;
    this.perHost[host]!--;
    if (--this.pieceInFlight[piece]! === 0) this.piecesInFlight--;
  }
}
