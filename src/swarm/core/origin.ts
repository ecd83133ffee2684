/**
 * Origin policy: the origin sends first copies only. It serves a piece while no host holds it, to at
 * most `originReadersMax` transfers at once, never the same piece to two transfers at once (a hedge
 * is the one exception), and to at most a few transfers per host so first copies land on many hosts
 * and the swarm fans them out at once. Together these make the origin send each byte about once.
 *
 * Pieces no host holds are bucket 0 of the rarity index; this module picks among them at random
 * and counts what is in flight from the origin per piece and per host.
 *
 * At scale the origin also takes turns: a host whose origin transfer just finished is planned first
 * (its download slot freed), and without turns it would take the origin's next first copy too, so a
 * few hosts would get every first copy while the others got none. A host may take another only
 * after about half of the other hosts have had one (see hasTurn).
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
  /** Origin transfers started so far, and that count when each host last got one (-1: never). */
  private started = 0;
  private lastStarted = new Float64Array(0);

  constructor(pieceCount: number, readersMax: number, perHostMax: number | undefined) {
    this.readersMax = readersMax;
    this.pieceInFlight = new Uint8Array(pieceCount);
    this.perHostOverride = perHostMax;
  }

  ensureHosts(hostCount: number): void {
    if (hostCount <= this.perHost.length) return;
    const size = Math.max(hostCount, this.perHost.length * 2);
    const grown = new Int32Array(size);
    grown.set(this.perHost);
    this.perHost = grown;
    const last = new Float64Array(size).fill(-1);
    last.set(this.lastStarted);
    this.lastStarted = last;
  }

  /** A host (re)joins: it has its turn at once. */
  join(host: number): void {
    this.lastStarted[host] = -1;
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

  /**
   * True when `host` may take an origin transfer as far as turns go: always while few hosts share
   * the readers (perHostMax above 1), else once (hostsDownloading - readersMax) / 2 other origin
   * transfers have started since its last one. Half, so about half the hosts have their turn at
   * any time and a free reader finds one of them within a few download-slot completions.
   */
  hasTurn(host: number, hostsDownloading: number, perHostMax: number): boolean {
    const last = this.lastStarted[host]!;
    if (last < 0 || perHostMax > 1) return true;
    // A host that may take every reader (a chain's head, which takes every first copy) takes no
    // turns: no other host takes first copies, so with one reader it would wait for ever for the
    // others' turns (a chain with `--origin-readers 1` stopped after its first piece).
    if (this.perHostOverride !== undefined && this.perHostOverride >= this.readersMax) return true;
    return this.started - 1 - last >= (hostsDownloading - this.readersMax) / 2;
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
    this.lastStarted[host] = this.started++;
    this.active++;
    this.perHost[host]!++;
    if (this.pieceInFlight[piece]!++ === 0) this.piecesInFlight++;
  }

  /** The transfer's last bytes are on their way: its reader and its share of the host are free. */
  end(host: number): void {
    this.active--;
    this.perHost[host]!--;
  }

  /** The transfer finished; `ended` when end() already released its reader. */
  finish(host: number, piece: number, ended: boolean): void {
    if (!ended) this.end(host);
    if (--this.pieceInFlight[piece]! === 0) this.piecesInFlight--;
  }
}
