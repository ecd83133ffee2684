/**
 * One model's swarm inside the scheduler: the pure SwarmCore plus what the shell must remember
 * around it: each host's name and piece-server URL, the assignments and cancellations waiting for
 * its next sync, a parked sync request to answer as soon as there is work, and when it was last
 * heard from. Time comes from the caller (`nowMs`), so this class is testable without waiting;
 * the timers that drive `tick` live in scheduler-server.ts.
 *
 * In ring mode (`ringPush`) it also runs the ring plan (core/ring-plan.ts): every host joins a ring,
 * each is told its ring parent's URL in a reply, the pieces pushed to it come in batched `held`
 * lists (the core's handleHeld), and a host whose feed failed (`ringLost`) or stalled is cut.
 */

import { WeightcastError } from '../../errors.js';
import { ORIGIN, SwarmCore, type Assignment, type SwarmConfig } from '../core/index.js';
import {
  NO_PARENT,
  RING_STALL_MS_DEFAULT,
  RingPlan,
  autoChainMembersMax,
  ringOriginReaders,
} from '../core/ring-plan.js';
import type { PieceMap } from '../../piece/piece-map.js';
import { SWARM_SERVICE_DEFAULTS, type SwarmServiceOptions } from './defaults.js';
import { TRANSFER_UNIT_BYTES_DEFAULT, TransferUnits, unitPiecesFor } from './transfer-units.js';
import {
  decodeBitfield,
  type Register,
  type Registered,
  type Sync,
  type SyncReply,
  type SwarmStatus,
  type WireAssignment,
} from '../wire/protocol.js';

export { SWARM_SERVICE_DEFAULTS, type SwarmServiceOptions };

/** Peers a sync reply lists for the agent's fallback mode. */
const PEERS_LISTED_MAX = 64;
/**
 * Ring mode: a feed lost this soon after its parent reported its own lost is taken for a piece the
 * parent passed on as it arrived (cut-through) and found corrupt itself: the child is fed by the
 * same parent again. The parent's report comes first (it checks the piece one read sooner).
 */
const RING_PASSED_ON_MS = 1000;
/**
 * Ring mode: reports of one corrupt piece are gathered this long before anyone is moved. Cut
 * through as it arrived, one corrupt push reaches several hops (seen: 4) before the checks catch it,
 * and every host on the way reports its parent, in any order: the batch names as culprit only the
 * parent that did not report the piece itself.
 */
const RING_CORRUPT_BATCH_MS = 100;
/** Rounds of cancel-then-replan in one distribute; each round only follows cancellations. */
const DISTRIBUTE_ROUNDS_MAX = 8;

interface HostEntry {
  id: number;
  name: string;
  url: string;
  lastSeenMs: number;
  outbox: WireAssignment[];
  cancels: number[];
  /** The membership version of the peer list last sent to this host (none yet: -1). */
  peersSent: number;
  /** Its rack label, if it gave one (its rack-mates come first in the peer lists it is sent). */
  rack?: string;
  /** A sync waiting for work: call it to answer now. */
  wake?: () => void;
  /** Ring mode: the ring parent to tell this host of (a URL, '' for none), once. */
  ringNews?: string;
  /** A rack-mate joined or left since its last reply: its peer list goes out now, not with the next work. */
  rackNews?: boolean;
}

export class SwarmService {
  readonly core: SwarmCore;
  private readonly hosts = new Map<number, HostEntry>();
  private readonly byName = new Map<string, number>();
  private readonly transferHost = new Map<number, { host: number; unit: number; from: number }>();
  /** What the core calls pieces are transfer units; the wire speaks pieces (see transfer-units.ts). */
  readonly units: TransferUnits;
  private readonly freeIds: number[] = [];
  /**
   * Ids of hosts that left carrying blame (banned, corrupt, distrusted), by name: never given to
   * another host (it would inherit the mark), and given back to the same name (the mark stays).
   */
  private readonly blamedIds = new Map<string, number>();
  private nextId = 0;
  /** Bumped whenever a host joins or leaves: a reply lists the peers only when it moved. */
  private membership = 0;
  originBytes = 0;
  /** Ring mode's plan (options.ringPush), else undefined. */
  readonly ring: RingPlan | undefined;
  /** Ring mode: hosts (by name) whose failed feed put their parent out of the ring (once each)... */
  private readonly ringEvictors = new Set<string>();
  /** ...and the parents put out, who stay out (a restart keeps the name). */
  private readonly ringEvicted = new Set<string>();
  /** Ring mode: when each host (by name) last reported its feed lost. */
  private readonly ringReportedMs = new Map<string, number>();
  /** Ring mode: reports of a corrupt push, by piece, waiting for RING_CORRUPT_BATCH_MS. */
  private readonly corruptReports = new Map<
    number,
    { firstMs: number; reports: Array<{ host: number; name: string; parentUrl: string | undefined }> }
  >();
  /** Ring mode: hosts (by name) just put out of their place by a report, when and by whom. */
  private readonly ringBlamed = new Map<string, { atMs: number; by: string }>();

  /** Auto mode: the chain's length at most (past it the chain is dissolved); undefined otherwise. */
  private readonly chainAutoMax: number | undefined;
  /** Auto mode: the swarm grew past one chain and went per piece for good. */
  private ringDissolved = false;

  constructor(
    readonly model: string,
    readonly map: PieceMap,
    private readonly options: SwarmServiceOptions,
  ) {
    if (options.ringAuto === true) {
      const max = autoChainMembersMax(map.totalBytes);
      const rest: SwarmServiceOptions = { ...options };
      delete rest.ringPush;
      delete rest.ringChain;
      delete rest.ringAuto;
      this.options = options = max >= 2 ? { ...rest, ringPush: true, ringChain: true } : rest;
      this.chainAutoMax = max >= 2 ? max : undefined;
    }
    this.units = new TransferUnits(
      map,
      options.ringPush === true
        ? 1
        : (options.transferUnitPieces ??
            unitPiecesFor(map.pieceSize, map.pieceCount, TRANSFER_UNIT_BYTES_DEFAULT)),
    );
    this.core = new SwarmCore(coreConfig(this.units, options));
    this.ring =
      options.ringPush === true
        ? new RingPlan({ stallMs: RING_STALL_MS_DEFAULT, chain: options.ringChain === true })
        : undefined;
  }

  /** How this swarm is planned, for the scheduler's log: per piece, rings, or a chain (up to how many hosts). */
  get plan(): string {
    if (this.ring === undefined) return 'per piece';
    if (this.options.ringChain !== true) return 'rings';
    if (this.chainAutoMax === undefined) return 'one chain';
    return this.ringDissolved
      ? 'per piece (outgrew one chain)'
      : `one chain up to ${this.chainAutoMax} hosts, then per piece`;
  }

  get hostCount(): number {
    return this.hosts.size;
  }

  /**
   * An opaque token for the host's current registration. Host ids are reused after a host leaves,
   * so a connection opened for one registration checks its token before acting for the id: a
   * stale channel of a killed agent must never take the replies meant for its successor.
   */
  registrationOf(host: number): object | undefined {
    return this.hosts.get(host);
  }

  register(nowMs: number, message: Register): Registered {
    const held = this.units.unitsHeld(decodeBitfield(message.have, this.map.pieceCount));
    // An agent that restarted registers under the same name and address: its old self is gone. A
    // registration from another address cannot take over a host that is still alive (heard from
    // within its timeout): it is refused until that host goes silent.
    const previous = this.byName.get(message.name);
    const old = previous === undefined ? undefined : this.hosts.get(previous);
    if (
      old !== undefined &&
      old.url !== message.url &&
      nowMs - old.lastSeenMs <= this.options.hostTimeoutMs
    ) {
      throw new WeightcastError(
        'SWARM_NAME_IN_USE',
        `host name ${JSON.stringify(message.name)} belongs to a live host at ${old.url}`,
        { name: message.name },
      );
    }
    if (previous !== undefined) this.drop(nowMs, previous);
    const blamed = this.blamedIds.get(message.name);
    if (blamed !== undefined && this.core.isEjected(blamed)) throw distrusted(message.name);
    if (blamed !== undefined) this.blamedIds.delete(message.name);
    const id = blamed ?? this.freeIds.pop() ?? this.nextId++;
    const entry: HostEntry = {
      id,
      name: message.name,
      url: message.url,
      lastSeenMs: nowMs,
      outbox: [],
      cancels: [],
      peersSent: -1,
      ...(message.rack === undefined ? {} : { rack: message.rack }),
    };
    this.hosts.set(id, entry);
    this.membership++;
    this.tellRackMates(entry);
    this.byName.set(message.name, id);
    this.core.addHost(
      nowMs,
      {
        id,
        uploadBytesPerSecond: message.uploadBytesPerSecond,
        downloadBytesPerSecond: message.downloadBytesPerSecond,
        ...(message.zone === undefined ? {} : { zone: message.zone }),
        ...(message.rack === undefined ? {} : { rack: message.rack }),
      },
      held,
    );
    if (this.ring !== undefined && this.chainAutoMax !== undefined && !this.ringDissolved) {
      if (this.ring.size >= this.chainAutoMax && !this.ring.has(id)) this.dissolveRing(nowMs);
    }
    if (!this.ringEvicted.has(message.name) && !this.ringDissolved) this.ring?.join(nowMs, id);
    this.applyRing(nowMs);
    this.distribute(nowMs);
    // Ring news goes with the answer: the feed opens a round trip sooner than with the first sync.
    const ringNews = entry.ringNews;
    delete entry.ringNews;
    // So do the peers: a chain member's syncs wait while its pushes carry everything, and without
    // a scheduler the peers that joined before it (ahead of it in the chain) are whom it turns to.
    entry.peersSent = this.membership;
    return {
      host: id,
      pieceCount: this.map.pieceCount,
      hostTimeoutMs: this.options.hostTimeoutMs,
      ...(message.assignmentsInReply === true ? { assignments: entry.outbox.splice(0) } : {}),
      ...(ringNews === undefined ? {} : { ring: this.ringReply(entry, ringNews) }),
      ...this.peersFor(entry),
    };
  }

  /** Applies a sync's reports and urgent pieces; the reply is taken with `takeReply`. */
  sync(nowMs: number, host: number, message: Sync): void {
    const entry = this.entry(host);
    entry.lastSeenMs = nowMs;
    for (const report of message.reports) {
      const transfer = this.transferHost.get(report.transferId);
      // Reports about transfers this host does not own are ignored, never trusted.
      if (transfer === undefined || transfer.host !== host) continue;
      this.transferHost.delete(report.transferId);
      this.core.handleTransfer(nowMs, {
        transferId: report.transferId,
        outcome: report.outcome,
        ...(report.bytesPerSecond === undefined ? {} : { bytesPerSecond: report.bytesPerSecond }),
      });
    }
    for (const transferId of message.ending ?? []) {
      const transfer = this.transferHost.get(transferId);
      if (transfer === undefined || transfer.host !== host) continue;
      this.core.handleTransferEnding(nowMs, transferId);
    }
    if (this.ring !== undefined) {
      const pieces = (message.held ?? []).filter((piece) => piece < this.map.pieceCount);
      if (pieces.length > 0) {
        this.core.handleHeld(nowMs, host, pieces);
        this.ring.delivered(nowMs, host);
      }
      if (message.ringLost !== undefined) {
        const piece = message.ringLostPiece;
        if (piece !== undefined && piece < this.map.pieceCount)
          this.deferCorruptReport(nowMs, entry, piece, message.ringLostParent);
        else this.ringLost(nowMs, entry, message.ringLostParent);
      }
    }
    if (this.core.isEjected(host)) {
      // Its reports kept failing re-checks: it leaves (its name stays marked) and is told why.
      this.drop(nowMs, host);
      this.distribute(nowMs);
      throw distrusted(entry.name);
    }
    const urgent = new Set<number>();
    for (const piece of message.urgent ?? []) {
      if (piece < this.map.pieceCount) urgent.add(this.units.unitOf(piece));
    }
    if (urgent.size > 0) this.core.prioritize(nowMs, host, [...urgent]);
    this.distribute(nowMs);
  }

  hasReply(host: number): boolean {
    const entry = this.hosts.get(host);
    return (
      entry !== undefined &&
      (entry.outbox.length > 0 ||
        entry.cancels.length > 0 ||
        entry.ringNews !== undefined ||
        entry.rackNews === true)
    );
  }

  takeReply(host: number): SyncReply {
    const entry = this.entry(host);
    // The peer list (for the member's fallback while the scheduler is gone) goes out once per
    // change of membership: with 64 URLs in every reply it was most of each assignment's bytes.
    // Absent means unchanged, so a list that became empty is still sent.
    const changed = entry.peersSent !== this.membership;
    entry.peersSent = this.membership;
    delete entry.rackNews;
    const ringNews = entry.ringNews;
    delete entry.ringNews;
    const reply: SyncReply = {
      assignments: entry.outbox.splice(0),
      cancellations: entry.cancels.splice(0),
      ...(changed ? this.peersFor(entry) : {}),
      ...(ringNews === undefined ? {} : { ring: this.ringReply(entry, ringNews) }),
    };
    return reply;
  }

  /**
   * Ring news for a reply: the parent's URL, or none, and then whether the host heads a chain; and
   * whether its ring is a chain.
   */
  private ringReply(entry: HostEntry, news: string): NonNullable<SyncReply['ring']> {
    const chain = this.ring?.chains === true ? { chain: true } : {};
    if (news !== '') return { parent: news, ...chain };
    return this.ring?.isHead(entry.id) === true ? { head: true, ...chain } : {};
  }

  /** Parks a sync until there is work for it (or `leave`/timeout); `wake` answers it. */
  park(host: number, wake: () => void): void {
    const entry = this.entry(host);
    entry.wake?.();
    entry.wake = wake;
  }

  unpark(host: number, wake: () => void): void {
    const entry = this.hosts.get(host);
    if (entry?.wake === wake) delete entry.wake;
  }

  leave(nowMs: number, host: number): void {
    this.entry(host);
    this.drop(nowMs, host);
    this.distribute(nowMs);
  }

  /** Drives the core's own timers and drops hosts that went silent; returns when to call again. */
  tick(nowMs: number): number | undefined {
    for (const entry of [...this.hosts.values()]) {
      // An open channel is no proof of life: a host syncs at least every heartbeat, so one that has
      // said nothing for the timeout is gone (stopped, cut off) even if its socket still looks open.
      if (nowMs - entry.lastSeenMs > this.options.hostTimeoutMs) {
        this.drop(nowMs, entry.id);
      }
    }
    const due = this.core.pollTimeout();
    if (due !== undefined && due <= nowMs) this.core.handleTimeout(nowMs);
    this.settleCorruptReports(nowMs);
    const ringDue = this.ring?.nextCheckMs();
    if (this.ring !== undefined && ringDue !== undefined && ringDue <= nowMs) {
      this.ring.check(nowMs, (parent, child) => this.core.holdsMissing(parent, child));
      this.applyRing(nowMs);
    }
    this.distribute(nowMs);
    const next = this.core.pollTimeout();
    const ringNext = this.ring?.nextCheckMs();
    return next === undefined ? ringNext : ringNext === undefined ? next : Math.min(next, ringNext);
  }

  /** A parked sync counts as contact: the host is alive while its request is open. */
  touch(nowMs: number, host: number): void {
    const entry = this.hosts.get(host);
    if (entry !== undefined) entry.lastSeenMs = nowMs;
  }

  status(): SwarmStatus {
    const stats = this.core.stats;
    return {
      model: this.model,
      pieceCount: this.units.count,
      totalBytes: this.map.totalBytes,
      hosts: [...this.hosts.values()].map((entry) => ({
        host: entry.id,
        name: entry.name,
        url: entry.url,
        held: this.core.heldCount(entry.id),
        complete: this.core.isComplete(entry.id),
        demoted: this.core.isDemoted(entry.id),
        banned: this.core.isBanned(entry.id),
      })),
      originBytesAssigned: this.originBytes,
      transfersInFlight: this.transferHost.size,
      originTransfersInFlight: [...this.transferHost.values()].filter((t) => t.from === ORIGIN).length,
      transfersVerified: stats.transfersVerified,
      transfersCorrupt: stats.transfersCorrupt,
      transfersFailed: stats.transfersFailed,
      rechecks: {
        started: stats.rechecksStarted,
        refuted: stats.rechecksRefuted,
        confirmed: stats.rechecksConfirmed,
      },
      ...(this.ring === undefined ? {} : { ring: this.ring.summary() }),
    };
  }

  private entry(host: number): HostEntry {
    const entry = this.hosts.get(host);
    if (entry === undefined) {
      throw new WeightcastError(
        'SWARM_UNKNOWN_HOST',
        `host ${host} is not registered in this swarm; register again`,
      );
    }
    return entry;
  }

  private drop(nowMs: number, host: number): void {
    const entry = this.hosts.get(host);
    if (entry === undefined) return;
    this.core.removeHost(nowMs, host);
    this.ring?.leave(nowMs, host);
    this.applyRing(nowMs);
    for (const [transferId, transfer] of this.transferHost) {
      if (transfer.host === host) this.transferHost.delete(transferId);
    }
    this.hosts.delete(host);
    this.membership++;
    this.tellRackMates(entry);
    if (this.byName.get(entry.name) === host) this.byName.delete(entry.name);
    if (this.core.isBlamed(host)) this.blamedIds.set(entry.name, host);
    else this.freeIds.push(host);
    entry.wake?.();
  }

  /**
   * Ring mode: `entry`'s feed from its ring parent failed (a corrupt or malformed push, a parent that
   * went quiet mid-piece or could not be reached again). The ring closes over the parent: one bad
   * parent mid-chain no longer starves every host behind it. In a chain the parent moves to the
   * tail; in a ring it leaves, planned per piece from then on (never a member again). Who is at
   * fault is not known, so a host gets this once; a second failure cuts the host itself out (a liar
   * cannot strip its ring of parents). A report about a parent since replaced changes nothing, nor
   * one about a parent whose own feed just failed (RING_PASSED_ON_MS).
   *
   * The two reports of a piece passed on as it arrived may come in either order. When the parent's
   * own report comes second, it names the parent it had before the first report moved it: that one
   * is closed over now, and the first reporter is forgiven (its strike void; in a ring the host it
   * put out comes back).
   */
  private ringLost(nowMs: number, entry: HostEntry, parentUrl: string | undefined): void {
    const ring = this.ring;
    if (ring === undefined) return;
    const parent = ring.parentOf(entry.id);
    const parentEntry = parent === NO_PARENT ? undefined : this.hosts.get(parent);
    const blamed = this.ringBlamed.get(entry.name);
    this.ringBlamed.delete(entry.name);
    if (parentEntry === undefined || (parentUrl !== undefined && parentUrl !== parentEntry.url)) {
      if (blamed !== undefined && nowMs - blamed.atMs <= RING_PASSED_ON_MS && parentUrl !== undefined)
        this.ringBlamedWrongly(nowMs, entry, blamed.by, parentUrl);
      return;
    }
    const reportedMs = this.ringReportedMs.get(parentEntry.name);
    this.ringReportedMs.set(entry.name, nowMs);
    if (reportedMs !== undefined && nowMs - reportedMs <= RING_PASSED_ON_MS) {
      // The parent's own feed failed a moment ago: it passed on, as it arrived, a piece that then
      // failed its own check too. Not its fault: the host subscribes to it again.
      this.tellRing(entry, parentEntry.url);
      return;
    }
    if (this.ringEvictors.has(entry.name)) {
      ring.cut(entry.id);
    } else {
      this.ringEvictors.add(entry.name);
      this.ringBlamed.set(parentEntry.name, { atMs: nowMs, by: entry.name });
      this.closeOver(nowMs, parent, parentEntry);
    }
    this.applyRing(nowMs);
  }

  /** Ring mode: a corrupt push of `piece` reported by `entry`, settled with the others in a batch. */
  private deferCorruptReport(
    nowMs: number,
    entry: HostEntry,
    piece: number,
    parentUrl: string | undefined,
  ): void {
    let batch = this.corruptReports.get(piece);
    if (batch === undefined) this.corruptReports.set(piece, (batch = { firstMs: nowMs, reports: [] }));
    // One report per host and piece; a batch is no larger than the swarm.
    if (batch.reports.some((report) => report.host === entry.id)) return;
    batch.reports.push({ host: entry.id, name: entry.name, parentUrl });
  }

  /**
   * Ring mode: batches of corrupt-push reports old enough are settled. A host whose parent reported
   * the same piece was passed it as it arrived: it subscribes to its parent again. The others' parents
   * are at fault, each closed over as any failed feed (ringLost), and that first, so the re-told
   * hosts get the parents the chain has after.
   */
  private settleCorruptReports(nowMs: number): void {
    for (const [piece, batch] of this.corruptReports) {
      if (nowMs - batch.firstMs < RING_CORRUPT_BATCH_MS) continue;
      this.corruptReports.delete(piece);
      const reporters = new Set<string>();
      for (const report of batch.reports) {
        const entry = this.hosts.get(report.host);
        if (entry !== undefined && entry.name === report.name) reporters.add(entry.url);
      }
      const passedOn: HostEntry[] = [];
      for (const report of batch.reports) {
        const entry = this.hosts.get(report.host);
        if (entry === undefined || entry.name !== report.name) continue;
        if (report.parentUrl !== undefined && reporters.has(report.parentUrl)) {
          passedOn.push(entry);
          continue;
        }
        // The parent sent it: the core weighs it as a corrupt transfer (no fetches from that parent
        // for this host, a re-check by a third), or it would plan this host's pieces from it next.
        const parent = this.ring?.parentOf(entry.id) ?? NO_PARENT;
        const parentEntry = parent === NO_PARENT ? undefined : this.hosts.get(parent);
        if (parentEntry !== undefined && parentEntry.url === report.parentUrl)
          this.core.handleCorruptPush(nowMs, entry.id, parent, piece);
        this.ringLost(nowMs, entry, report.parentUrl);
      }
      for (const entry of passedOn) {
        const parent = this.ring?.parentOf(entry.id) ?? NO_PARENT;
        this.tellRing(entry, parent === NO_PARENT ? '' : (this.hosts.get(parent)?.url ?? ''));
      }
    }
  }

  /**
   * Auto mode: the swarm outgrew one chain (`autoChainMembersMax`): every member leaves it, told it
   * has no parent, and is planned per piece from now on, as every host that comes later. The
   * feeds end; what they had pushed stays held.
   */
  private dissolveRing(nowMs: number): void {
    const ring = this.ring as RingPlan;
    this.ringDissolved = true;
    const members = ring.members();
    for (const member of members) ring.leave(nowMs, member);
    for (const member of members) {
      this.core.setRing(nowMs, member, -1, false);
      const entry = this.hosts.get(member);
      if (entry !== undefined) this.tellRing(entry, '');
    }
  }

  /** Ring mode: `parent` leaves its place; in a chain it goes to the tail, in a ring out for good. */
  private closeOver(nowMs: number, parent: number, parentEntry: HostEntry): void {
    const ring = this.ring as RingPlan;
    ring.leave(nowMs, parent);
    if (this.options.ringChain === true) {
      // In a chain the parent goes to the tail: it still gets every piece pushed, and feeds
      // nobody (planned per piece instead, it took uploads from the chain: 17-21 s instead of 13).
      ring.join(nowMs, parent);
    } else {
      // Out of the ring: no parent to subscribe to, planned per piece like a cut host.
      this.ringEvicted.add(parentEntry.name);
      this.core.setRing(nowMs, parent, -1, false);
      this.tellRing(parentEntry, '');
    }
  }

  /**
   * Ring mode: `entry` was put out of its place by `by`'s report a moment ago, and now reports its
   * own feed from `parentUrl` (its parent then) failed: the piece `by` found corrupt came from
   * there. `by` is forgiven, `entry` readmitted to a ring it left, and the real parent closed over
   * (once per reporter, as any report).
   */
  private ringBlamedWrongly(nowMs: number, entry: HostEntry, by: string, parentUrl: string): void {
    const ring = this.ring as RingPlan;
    this.ringEvictors.delete(by);
    if (this.ringEvicted.delete(entry.name)) ring.join(nowMs, entry.id);
    this.ringReportedMs.set(entry.name, nowMs);
    let culprit: HostEntry | undefined;
    for (const other of this.hosts.values()) if (other.url === parentUrl) culprit = other;
    if (this.ringEvictors.has(entry.name)) ring.cut(entry.id);
    else if (culprit !== undefined && ring.has(culprit.id)) {
      this.ringEvictors.add(entry.name);
      this.closeOver(nowMs, culprit.id, culprit);
    }
    this.applyRing(nowMs);
  }

  /**
   * `changed` joined or left: its rack-mates are told at once (a waiting sync is answered with the
   * peer list). Without a scheduler a member brings into its rack only its share of the pieces
   * (core/fallback.ts, rack stripes), and that needs the rack-mates' lists to agree: one that
   * learned of a rack-mate only with its next work, which the scheduler's loss can stop, took every
   * piece from another rack. At most one reply per rack-mate per change.
   */
  private tellRackMates(changed: HostEntry): void {
    if (changed.rack === undefined) return;
    for (const entry of this.hosts.values()) {
      if (entry === changed || entry.rack !== changed.rack) continue;
      entry.rackNews = true;
      const wake = entry.wake;
      delete entry.wake;
      wake?.();
    }
  }

  /** Ring mode: `news` (its parent's URL, '' for none) goes out in the host's next reply, now. */
  private tellRing(entry: HostEntry, news: string): void {
    entry.ringNews = news;
    const wake = entry.wake;
    delete entry.wake;
    wake?.();
  }

  /** Ring mode: passes the plan's changes to the core and into the hosts' next replies. */
  private applyRing(nowMs: number): void {
    if (this.ring === undefined) return;
    for (const change of this.ring.pollChanges()) {
      this.core.setRing(nowMs, change.host, change.ring, change.parent !== NO_PARENT);
      const entry = this.hosts.get(change.host);
      if (entry === undefined) continue;
      this.tellRing(entry, change.parent === NO_PARENT ? '' : (this.hosts.get(change.parent)?.url ?? ''));
    }
  }

  /**
   * Moves the core's new assignments and cancellations into the hosts' outboxes, waking syncs. A
   * cancelled transfer is closed in the core at once (the agent is told to stop, but its slot does
   * not wait for an agent that may be slow or gone to confirm), which may free slots for new
   * assignments: hence the bounded loop.
   */
  private distribute(nowMs: number): void {
    const woken = new Set<HostEntry>();
    for (let round = 0; round < DISTRIBUTE_ROUNDS_MAX; round++) {
      this.route(this.core.pollAssignments(nowMs), woken);
      const cancelled = this.core.pollCancellations();
      if (cancelled.length === 0) break;
      for (const transferId of cancelled) {
        const transfer = this.transferHost.get(transferId);
        this.transferHost.delete(transferId);
        this.core.handleTransfer(nowMs, { transferId, outcome: 'cancelled' });
        const entry = transfer === undefined ? undefined : this.hosts.get(transfer.host);
        if (entry === undefined) continue;
        entry.cancels.push(transferId);
        woken.add(entry);
      }
    }
    for (const entry of woken) {
      const wake = entry.wake;
      delete entry.wake;
      wake?.();
    }
  }

  private route(assignments: readonly Assignment[], woken: Set<HostEntry>): void {
    for (const assignment of assignments) {
      const entry = this.hosts.get(assignment.host);
      if (entry === undefined) continue;
      const from = assignment.from === ORIGIN ? undefined : this.hosts.get(assignment.from);
      if (assignment.from !== ORIGIN && from === undefined) continue;
      const unit = assignment.piece;
      this.transferHost.set(assignment.transferId, { host: assignment.host, unit, from: assignment.from });
      if (assignment.from === ORIGIN) this.originBytes += this.units.length(unit);
      const count = this.units.pieces(unit);
      entry.outbox.push({
        transferId: assignment.transferId,
        piece: this.units.firstPiece(unit),
        ...(count > 1 ? { count } : {}),
        from: from === undefined ? 'origin' : from.url,
        ...(from === undefined ? {} : { peer: from.id }),
        hedge: assignment.hedge,
      });
      woken.add(entry);
    }
  }

  /**
   * The peers `host` may use on its own: for a host with a rack, its rack-mates first and their
   * count (the fallback fetches from them first and brings each piece into the rack once).
   */
  private peersFor(host: HostEntry): Pick<SyncReply, 'peers' | 'rackPeers'> {
    const peers: string[] = [];
    const others: string[] = [];
    for (const entry of this.hosts.values()) {
      if (entry.id === host.id) continue;
      if (host.rack !== undefined && entry.rack === host.rack) peers.push(entry.url);
      else others.push(entry.url);
    }
    const rackPeers = Math.min(peers.length, PEERS_LISTED_MAX);
    peers.push(...others);
    peers.length = Math.min(peers.length, PEERS_LISTED_MAX);
    return host.rack === undefined ? { peers } : { peers, rackPeers };
  }
}

function distrusted(name: string): WeightcastError {
  return new WeightcastError(
    'SWARM_DISTRUSTED',
    `host ${JSON.stringify(name)} reported corrupt pieces that other hosts verified as correct, again and again: ` +
      'the bytes it receives fail verification there (a memory or disk fault?) or it lies; it was removed from the swarm',
    { name },
  );
}

/** The core's configuration for a swarm moved in `units`: what it calls pieces are the units. */
export function coreConfig(units: TransferUnits, options: SwarmServiceOptions): SwarmConfig {
  const lastLength = units.count === 0 ? 0 : units.length(units.count - 1);
  return {
    pieceCount: Math.max(1, units.count),
    pieceBytes: units.unitBytes || units.map.pieceSize,
    // The core sizes every unit but the last alike; per-file short units only skew its estimate
    // of origin bytes, which the service counts exactly itself.
    totalBytes: Math.max(1, (units.count - 1) * units.unitBytes + lastLength),
    originUploadBytesPerSecond: options.originBytesPerSecond,
    ...(options.ringPush === true
      ? ringOriginReaders(options.originReaders, options.ringChain === true)
      : { originReadersMax: options.originReaders }),
    downloadsPerHostMax: options.downloadsPerHost,
    uploadsPerHostMax: options.uploadsPerHost,
    // Counted in transfers: halving it for units of 2 left hosts trailing at 8 x 100 Mbit/s.
    hedgeTailPieces: options.hedgeTailPieces,
    randomSeed: options.randomSeed,
    ringParents: options.ringParents,
    ...(options.ringPush === true && options.ringChain === true ? { ringChain: true } : {}),
  };
}
