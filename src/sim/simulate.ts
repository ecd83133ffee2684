/**
 * The deterministic swarm simulator: the real scheduling core (src/swarm/core) driven by a fluid
 * network model (./network.ts) in virtual time. Each tick the network moves bytes; every transfer
 * that finishes is reported to the core at its exact finish time, and the core's new assignments
 * start after one request latency. Optional host failures remove hosts mid-run. One seed replays
 * a whole run exactly: there is no clock and no randomness but the seeded generators.
 *
 * Requests are pipelined as an agent would: when a flow has about one request latency of bytes
 * left, the core is told (`handleTransferEnding`) and the next request goes out, so its first byte
 * arrives as the last byte of the previous one does.
 *
 * Adversaries (`liarHosts`, `corruptHosts`, seeded like failures) test blame: a liar reports every
 * piece it gets from a peer as corrupt, a corrupt host sends corrupt bytes of every piece it
 * uploads. They download like everyone (a liar ends up fetching from the origin once it has
 * banned its peers), but only the honest hosts' completion ends a run and counts in the result.
 *
 * `schedulerLossAtMs` takes the scheduler away mid-run: from then on every host runs the agents'
 * fallback policy (swarm/core/fallback.ts) on what it alone knows, as a member without a scheduler
 * does (see FallbackSim below); in ring mode the pushes go on beside it. The hosts notice the loss
 * at once (an agent notices after SCHEDULER_SILENCE_MS_DEFAULT, a chain's head after HEAD_ALONE_MS).
 */

import { assert } from '../errors.js';
import { FALLBACK_ORIGIN_READS_MAX } from '../swarm/core/fallback.js';
import { Random } from '../swarm/core/random.js';
import { SwarmCore } from '../swarm/core/swarm-core.js';
import { RING_REPORT_MS_DEFAULT, RING_STALL_MS_DEFAULT, ringOriginReaders } from '../swarm/core/ring-plan.js';
import { ORIGIN, RING_PARENTS_DEFAULT, type HostSpec } from '../swarm/core/types.js';
import { fluidLowerBoundSeconds } from './bound.js';
import { FallbackSim } from './fallback-sim.js';
import type { FlowEvents } from './flow-events.js';
import { FluidNetwork, type Endpoint } from './network.js';
import { RingSim } from './ring-sim.js';

export interface SimOptions {
  hosts: number;
  totalBytes: number;
  pieceBytes: number;
  /** Each host's upload and download capacity. */
  hostBytesPerSecond: number;
  originBytesPerSecond: number;
  /** Hosts are spread over this many racks (0: no racks). */
  racks: number;
  /** Capacity of each rack's uplink, each direction (0: unconstrained). */
  rackUplinkBytesPerSecond: number;
  /** Delay between an assignment and its first byte (a request round trip). */
  latencyMs: number;
  /** Hosts that fail during the run, at seeded times. */
  failHosts: number;
  seed: number;
  downloadsPerHost: number;
  uploadsPerHost: number;
  originReaders: number;
  hedgeTailPieces: number;
  /** SwarmConfig.ringParents (default RING_PARENTS_DEFAULT; 0 = off). */
  ringParents?: number;
  /** Virtual time step; by default an eighth of a piece's transfer time at a fair share. */
  tickMs?: number;
  /** Request the next piece when a transfer has one latency left (default true). */
  pipelining?: boolean;
  /** Assert every tick that no link carried more than its capacity (slower; for tests). */
  checkLinks?: boolean;
  /**
   * The scheduler goes away at this virtual time (ms): the transfers under way finish, and every host
   * fetches on with the fallback policy. Unset: the scheduler stays.
   */
  schedulerLossAtMs?: number;
  /** Hosts that report every piece from a peer as corrupt (made-up accusations). Default 0. */
  liarHosts?: number;
  /** Hosts that upload corrupt bytes of every piece. Default 0. */
  corruptHosts?: number;
  /**
   * Ring mode (swarm/core/ring-plan.ts, ./ring-sim.ts): the hosts form a ring and each pushes its
   * child every piece it gets; the core plans only first copies, and every host whose ring link
   * stalls. Not combined with adversaries (yet). After a scheduler loss the pushes go on, and each
   * host fetches on its own by the ring's fallback rules (fallback-sim.ts).
   */
  ringPush?: boolean;
  /** Ring mode: a link quiet this long while its parent has more is cut (default RING_STALL_MS_DEFAULT). */
  ringStallMs?: number;
  /** Ring mode: how often hosts tell the scheduler of pushed pieces (default RING_REPORT_MS_DEFAULT). */
  ringReportMs?: number;
  /** Ring mode as chains (ring-plan.ts `chain`). */
  ringChain?: boolean;
  /** Ring mode: members of one ring or chain at most (ring-plan.ts's defaults). */
  ringMembersMax?: number;
  /**
   * Ring mode: pushed pieces are stored, then pushed on (the agents pass them on as they arrive,
   * unless an upload throttle is set). Default false: cut-through, as the agents do.
   */
  ringStoreForward?: boolean;
}

/**
 * The agents' SO_RCVLOWAT ceiling (util/receive-low-water.ts LOW_WATER_MAX_BYTES, which the sim may
 * not import: it loads the native helper): a piece passed on as it arrives goes out one such read
 * after its first bytes land.
 */
export const FIRST_READ_BYTES_MAX = 256 * 1024;

export interface SimResult {
  hostsCompleted: number;
  hostsFailed: number;
  /** True when the run stopped before every surviving host completed (a bug or a starved swarm). */
  incomplete: boolean;
  tLastMs: number;
  tLowerBoundMs: number;
  efficiency: number;
  originBytes: number;
  originRatio: number;
  /** When the origin finished its last transfer: S/U is the earliest it can. */
  originDoneMs: number;
  p50Ms: number;
  p99Ms: number;
  transfers: number;
  ticks: number;
  tickMs: number;
  /** Transfers the hosts started on their own after the scheduler went (schedulerLossAtMs). */
  fallbackTransfers: number;
  /** Of them, fetches that found their peer's upload slots full and went elsewhere. */
  fallbackBusy: number;
  /** Transfers reported corrupt (true or made up), and re-checks of suspected pieces started. */
  corruptTransfers: number;
  rechecks: number;
  /** Honest hosts banned or (still) demoted as parents at the end: 0 when blame needs evidence. */
  honestBanned: number;
  honestDemoted: number;
  /** Liars distrusted and corrupt hosts banned at the end, of all adversaries. */
  adversariesCaught: number;
  adversaries: number;
  /** Ring mode: pieces pushed along the ring (no assignment, request or report of their own). */
  pushes: number;
  /** Ring mode: hosts whose ring link was cut by the end. */
  ringCuts: number;
}

/** Runs stop after this many times the lower bound, whatever happens. */
const TIME_LIMIT_FACTOR = 50;

export function simulate(options: SimOptions): SimResult {
  const run = new SimRun(options);
  return run.execute();
}

class SimRun {
  private readonly options: SimOptions;
  private readonly core: SwarmCore;
  private readonly network: FluidNetwork;
  private readonly originEndpoint: number;
  private readonly pieceCount: number;
  private readonly completedAt: Float64Array;
  private readonly failed = new Set<number>();
  private readonly failures: Array<{ atMs: number; host: number }>;
  private readonly liars = new Set<number>();
  private readonly corrupt = new Set<number>();
  private readonly honestHosts: number;
  private originBytes = 0;
  private originDoneMs = 0;
  private lastProgressMs = 0;
  private transferCount = 0;
  private completed = 0;
  /** Piece of every flow the core assigned, while it runs. */
  private readonly pieceOf = new Map<number, number>();
  private highestTransferId = 0;
  /** Set once the scheduler is gone (options.schedulerLossAtMs). */
  private fallback: FallbackSim | undefined;
  /** Ring mode (options.ringPush). */
  private readonly ring: RingSim | undefined;

  constructor(options: SimOptions) {
    assert(options.hosts >= 1 && options.totalBytes > 0 && options.pieceBytes > 0, 'simulator options');
    this.options = options;
    this.pieceCount = Math.ceil(options.totalBytes / options.pieceBytes);
    this.originEndpoint = options.hosts;
    this.completedAt = new Float64Array(options.hosts).fill(Number.NaN);
    const endpoints: Endpoint[] = [];
    const perMs = options.hostBytesPerSecond / 1000;
    for (let host = 0; host < options.hosts; host++) {
      endpoints.push({
        uploadBytesPerMs: perMs,
        downloadBytesPerMs: perMs,
        rack: options.racks > 0 ? host % options.racks : -1,
      });
    }
    endpoints.push({
      uploadBytesPerMs: options.originBytesPerSecond / 1000,
      downloadBytesPerMs: 0,
      rack: -1,
    });
    const noticeMs = options.pipelining === false ? 0 : options.latencyMs;
    this.network = new FluidNetwork(
      endpoints,
      options.racks,
      options.rackUplinkBytesPerSecond / 1000,
      noticeMs,
      options.checkLinks === true,
    );
    this.core = new SwarmCore({
      pieceCount: this.pieceCount,
      pieceBytes: options.pieceBytes,
      totalBytes: options.totalBytes,
      originUploadBytesPerSecond: options.originBytesPerSecond,
      ...(options.ringPush === true
        ? ringOriginReaders(options.originReaders, options.ringChain === true)
        : { originReadersMax: options.originReaders }),
      downloadsPerHostMax: options.downloadsPerHost,
      uploadsPerHostMax: options.uploadsPerHost,
      hedgeTailPieces: options.hedgeTailPieces,
      randomSeed: options.seed,
      ringParents: options.ringParents ?? RING_PARENTS_DEFAULT,
      ...(options.ringPush === true && options.ringChain === true ? { ringChain: true } : {}),
    });
    for (let host = 0; host < options.hosts; host++) this.core.addHost(0, this.hostSpec(host));
    if (options.ringPush === true) {
      assert(
        (options.liarHosts ?? 0) === 0 && (options.corruptHosts ?? 0) === 0,
        'simulator options: ring mode takes no adversaries',
      );
      this.ring = new RingSim(
        {
          hosts: options.hosts,
          pieceCount: this.pieceCount,
          latencyMs: options.latencyMs,
          stallMs: options.ringStallMs ?? RING_STALL_MS_DEFAULT,
          reportMs: options.ringReportMs ?? RING_REPORT_MS_DEFAULT,
          chain: options.ringChain === true,
          ...(options.ringMembersMax === undefined ? {} : { membersMax: options.ringMembersMax }),
          cutThrough: options.ringStoreForward !== true,
          // Half a round trip, then the first read (at the host's rate).
          cutThroughLagMs:
            options.latencyMs / 2 +
            Math.min(options.pieceBytes, FIRST_READ_BYTES_MAX) / (options.hostBytesPerSecond / 1000),
          pieceBytes: (piece) => this.pieceSize(piece),
        },
        this.core,
        this.network,
      );
    }
    this.planAdversaries();
    this.honestHosts = options.hosts - this.liars.size - this.corrupt.size;
    this.failures = this.planFailures();
  }

  execute(): SimResult {
    const boundMs = this.boundMs();
    const tickMs = this.options.tickMs ?? this.defaultTickMs();
    const limitMs = boundMs * TIME_LIMIT_FACTOR + 1000;
    this.startAssignments(0);
    let now = 0;
    let ticks = 0;
    let failureIndex = 0;
    while (this.completed + this.failed.size < this.honestHosts && now < limitMs) {
      const next = now + tickMs;
      const lossAtMs = this.options.schedulerLossAtMs;
      if (this.fallback === undefined && lossAtMs !== undefined && lossAtMs < next) {
        this.loseScheduler(Math.max(now, lossAtMs));
      }
      this.fallback?.tick(now);
      const events = this.network.step(now, next);
      for (let i = 0; i < events.length; i++) {
        if (events.isDone(i)) this.finish(events, i);
        else this.ending(events.transferId(i), events.atMs(i));
      }
      while (
        failureIndex < this.failures.length &&
        (this.failures[failureIndex] as { atMs: number }).atMs < next
      ) {
        const failure = this.failures[failureIndex++] as { atMs: number; host: number };
        this.fail(failure.host, failure.atMs);
      }
      if (this.ring?.tick(next) === true) {
        for (const cancelled of this.core.pollCancellations()) this.cancel(cancelled, next);
        this.startAssignments(next);
      }
      const wake = this.fallback === undefined ? this.core.pollTimeout() : undefined;
      if (wake !== undefined && wake < next) {
        this.core.handleTimeout(Math.max(wake, now));
        this.startAssignments(Math.max(wake, now));
      }
      now = next;
      ticks++;
      if (this.network.flowCount === 0) this.startAssignments(now);
      if (
        this.fallback === undefined &&
        this.network.flowCount === 0 &&
        this.core.pollTimeout() === undefined &&
        this.ring?.busy !== true
      )
        break;
      // A swarm that stops making progress is reported as incomplete rather than ticked to the limit.
      if (now - this.lastProgressMs > Math.max(boundMs, 1000 * tickMs)) break;
    }
    return this.result(boundMs, tickMs, ticks);
  }

  private ending(transferId: number, atMs: number): void {
    // Without a scheduler nobody plans ahead: a member on its own asks when a fetch ends. A push is
    // the core's business only once reported; its parent writes the next one behind it.
    if (this.ring?.isPush(transferId) === true) {
      this.ring.pushEnding(atMs, transferId);
      return;
    }
    if (this.fallback !== undefined) return;
    this.core.handleTransferEnding(atMs, transferId);
    this.startAssignments(atMs);
  }

  private finish(events: FlowEvents, i: number): void {
    const transferId = events.transferId(i);
    const atMs = events.atMs(i);
    const bytes = events.bytes(i);
    const src = events.src(i);
    const dst = events.dst(i);
    // A hedge that finished in the same tick as its twin was cancelled (and reported) by the twin.
    if (this.network.remove(transferId) < 0) return;
    this.lastProgressMs = atMs;
    if (src === this.originEndpoint) {
      this.originBytes += bytes;
      this.originDoneMs = atMs;
    }
    if (this.ring?.isPush(transferId) === true) {
      for (const host of this.ring.finishPush(atMs, transferId)) this.noteComplete(host, atMs);
      return;
    }
    if (this.fallback !== undefined) {
      this.fallback.settle(transferId, true, atMs);
      this.noteComplete(dst, atMs);
      return;
    }
    const piece = this.pieceOf.get(transferId);
    this.pieceOf.delete(transferId);
    const seconds = Math.max(1e-9, (atMs - events.startAtMs(i)) / 1000);
    const fromPeer = src !== this.originEndpoint;
    if (fromPeer && (this.corrupt.has(src) || this.liars.has(dst))) {
      this.core.handleTransfer(atMs, { transferId, outcome: 'corrupt' });
    } else {
      this.core.handleTransfer(atMs, { transferId, outcome: 'verified', bytesPerSecond: bytes / seconds });
    }
    if (this.ring !== undefined && piece !== undefined) this.ring.gainedByTransfer(atMs, dst, piece);
    for (const cancelled of this.core.pollCancellations()) this.cancel(cancelled, atMs);
    this.noteComplete(dst, atMs);
    this.startAssignments(atMs);
  }

  private noteComplete(host: number, atMs: number): void {
    const complete =
      this.fallback !== undefined
        ? this.fallback.isComplete(host)
        : this.ring !== undefined
          ? this.ring.isComplete(host)
          : this.core.isComplete(host);
    if (complete && Number.isNaN(this.completedAt[host]) && !this.failed.has(host) && this.isHonest(host)) {
      this.completedAt[host] = atMs;
      this.completed++;
    }
  }

  /**
   * The scheduler goes: its assignments under way carry on as the hosts' own, and from now on every
   * host picks its fetches with the fallback policy.
   */
  private loseScheduler(atMs: number): void {
    const ring = this.ring;
    const fallback = new FallbackSim(
      {
        hosts: this.options.hosts,
        pieceCount: this.pieceCount,
        downloadsMax: this.options.downloadsPerHost,
        originReadsMax: FALLBACK_ORIGIN_READS_MAX,
        uploadsMax: this.options.uploadsPerHost,
        latencyMs: this.options.latencyMs,
        seed: this.options.seed,
        originEndpoint: this.originEndpoint,
        pieceBytes: (piece) => this.pieceSize(piece),
        heldAtLoss: (host, piece) =>
          !this.failed.has(host) &&
          (ring === undefined ? this.core.hasPiece(host, piece) : ring.holds(host, piece)),
        firstTransferId: this.highestTransferId + 1,
        ...(this.options.racks > 0 ? { rackOf: (host: number) => host % this.options.racks } : {}),
        ...(ring === undefined
          ? {}
          : {
              ringView: (host: number, nowMs: number) => ring.feedView(host, nowMs),
              ringPeer: (host: number, nowMs: number) => ring.peerView(host, nowMs),
              subscribe: (child: number, parent: number, nowMs: number) =>
                ring.subscribeOnOwn(nowMs, child, parent),
              onGained: (host: number, piece: number, gainedAtMs: number) =>
                ring.gainedByTransfer(gainedAtMs, host, piece),
            }),
      },
      this.network,
      atMs,
    );
    if (ring !== undefined) {
      ring.schedulerGone(atMs);
      ring.onPushed = (host, piece, pushedAtMs) => fallback.gained(host, piece, pushedAtMs);
    }
    for (const host of this.failed) fallback.removeHost(host);
    for (const [transferId, piece] of this.pieceOf) {
      fallback.adoptLeftover(
        transferId,
        this.network.sender(transferId),
        this.network.receiver(transferId),
        piece,
      );
    }
    this.pieceOf.clear();
    this.fallback = fallback;
    fallback.tick(atMs);
  }

  /** Drops a flow, counting what the origin had already sent of it. */
  private drop(transferId: number, atMs: number): boolean {
    const src = this.network.sender(transferId);
    const delivered = this.network.remove(transferId);
    if (delivered < 0) return false;
    if (src === this.originEndpoint) this.originBytes += delivered;
    this.pieceOf.delete(transferId);
    this.fallback?.settle(transferId, false, atMs);
    return true;
  }

  private cancel(transferId: number, atMs: number): void {
    if (this.drop(transferId, atMs)) this.core.handleTransfer(atMs, { transferId, outcome: 'cancelled' });
  }

  private startAssignments(atMs: number): void {
    if (this.fallback !== undefined) return;
    for (const assignment of this.core.pollAssignments(atMs)) {
      this.pieceOf.set(assignment.transferId, assignment.piece);
      this.highestTransferId = Math.max(this.highestTransferId, assignment.transferId);
      if (this.ring !== undefined)
        assert(
          assignment.transferId < this.ring.lowestPushId,
          'simulator: transfer ids reached the push ids',
        );
      const src = assignment.from === ORIGIN ? this.originEndpoint : assignment.from;
      this.network.add(
        assignment.transferId,
        src,
        assignment.host,
        this.pieceSize(assignment.piece),
        atMs + this.options.latencyMs,
      );
      this.transferCount++;
    }
  }

  /** A host dies: its flows in both directions vanish (the core is told, and expects no reports). */
  private fail(host: number, atMs: number): void {
    if (this.failed.has(host) || !Number.isNaN(this.completedAt[host])) return;
    this.failed.add(host);
    this.fallback?.removeHost(host);
    for (const transferId of this.network.flowsOf(host)) this.drop(transferId, atMs);
    if (this.fallback !== undefined) {
      this.ring?.leave(atMs, host);
      return;
    }
    this.core.removeHost(atMs, host);
    this.ring?.leave(atMs, host);
    this.startAssignments(atMs);
  }

  private pieceSize(piece: number): number {
    const start = piece * this.options.pieceBytes;
    return Math.min(this.options.pieceBytes, this.options.totalBytes - start);
  }

  private hostSpec(host: number): HostSpec {
    const spec: HostSpec = {
      id: host,
      uploadBytesPerSecond: this.options.hostBytesPerSecond,
      downloadBytesPerSecond: this.options.hostBytesPerSecond,
    };
    if (this.options.racks > 0) {
      spec.rack = `rack-${host % this.options.racks}`;
      spec.zone = 'zone-0';
    }
    return spec;
  }

  private isHonest(host: number): boolean {
    return !this.liars.has(host) && !this.corrupt.has(host);
  }

  /** Liars and corrupt hosts, from the run's seed (a generator of their own: other draws stay as they were). */
  private planAdversaries(): void {
    const liars = this.options.liarHosts ?? 0;
    const corrupt = this.options.corruptHosts ?? 0;
    assert(liars + corrupt < this.options.hosts, 'simulator options: adversaries leave no honest host');
    const random = new Random(this.options.seed ^ 0xbad);
    while (this.liars.size < liars) this.liars.add(random.below(this.options.hosts));
    while (this.corrupt.size < corrupt) {
      const host = random.below(this.options.hosts);
      if (!this.liars.has(host)) this.corrupt.add(host);
    }
  }

  private boundMs(): number {
    const honest = this.options.hosts - (this.options.liarHosts ?? 0) - (this.options.corruptHosts ?? 0);
    const survivors = honest - Math.min(this.options.failHosts, honest - 1);
    return (
      fluidLowerBoundSeconds({
        totalBytes: this.options.totalBytes,
        hosts: survivors,
        originUploadBytesPerSecond: this.options.originBytesPerSecond,
        hostDownloadBytesPerSecond: this.options.hostBytesPerSecond,
        hostUploadBytesPerSecond: this.options.hostBytesPerSecond,
      }) * 1000
    );
  }

  /**
   * An eighth of a piece's transfer time at a fair share, and no longer than the request latency: a
   * transfer assigned mid-tick then starts in a later tick, where its rate is computed with the
   * others, so no transfer waits idle for a tick boundary.
   */
  private defaultTickMs(): number {
    const perFlowBytesPerMs = this.options.hostBytesPerSecond / 1000 / this.options.downloadsPerHost;
    const eighth = this.options.pieceBytes / perFlowBytesPerMs / 8;
    return this.options.latencyMs > 0 ? Math.min(eighth, this.options.latencyMs) : eighth;
  }

  /** Failure times and victims from the run's seed: spread over 10%-60% of the lower bound. */
  private planFailures(): Array<{ atMs: number; host: number }> {
    const count = Math.min(this.options.failHosts, this.honestHosts - 1);
    const random = new Random(this.options.seed ^ 0x5eed);
    const bound = this.boundMs();
    const victims = new Set<number>();
    while (victims.size < count) {
      const host = random.below(this.options.hosts);
      if (this.isHonest(host)) victims.add(host);
    }
    return [...victims]
      .map((host) => ({ host, atMs: bound * (0.1 + 0.5 * random.nextFloat()) }))
      .sort((a, b) => a.atMs - b.atMs || a.host - b.host);
  }

  private result(boundMs: number, tickMs: number, ticks: number): SimResult {
    const times = Array.from(this.completedAt)
      .filter((t) => !Number.isNaN(t))
      .sort((a, b) => a - b);
    const tLastMs = times.length > 0 ? (times[times.length - 1] as number) : Number.POSITIVE_INFINITY;
    const quantile = (q: number): number =>
      times[Math.min(times.length - 1, Math.floor(q * times.length))] ?? Number.NaN;
    return {
      hostsCompleted: this.completed,
      hostsFailed: this.failed.size,
      incomplete: this.completed + this.failed.size < this.honestHosts,
      tLastMs,
      tLowerBoundMs: boundMs,
      efficiency: boundMs / tLastMs,
      originBytes: this.originBytes,
      originRatio: this.originBytes / this.options.totalBytes,
      originDoneMs: this.originDoneMs,
      p50Ms: quantile(0.5),
      p99Ms: quantile(0.99),
      transfers: this.transferCount + (this.fallback?.transfers ?? 0),
      ticks,
      tickMs,
      fallbackTransfers: this.fallback?.transfers ?? 0,
      fallbackBusy: this.fallback?.busy ?? 0,
      pushes: this.ring?.pushes ?? 0,
      ringCuts: this.ring?.cuts ?? 0,
      ...this.blame(),
    };
  }

  private blame(): Pick<
    SimResult,
    'corruptTransfers' | 'rechecks' | 'honestBanned' | 'honestDemoted' | 'adversariesCaught' | 'adversaries'
  > {
    let honestBanned = 0;
    let honestDemoted = 0;
    for (let host = 0; host < this.options.hosts; host++) {
      if (!this.isHonest(host)) continue;
      if (this.core.isBanned(host)) honestBanned++;
      else if (this.core.isDemoted(host)) honestDemoted++;
    }
    let caught = 0;
    for (const host of this.liars) if (this.core.isDemoted(host) || this.core.isBanned(host)) caught++;
    for (const host of this.corrupt) if (this.core.isBanned(host)) caught++;
    return {
      corruptTransfers: this.core.stats.transfersCorrupt,
      rechecks: this.core.stats.rechecksStarted,
      honestBanned,
      honestDemoted,
      adversariesCaught: caught,
      adversaries: this.liars.size + this.corrupt.size,
    };
  }
}
