/**
 * SwarmCore: the central scheduler's state machine. It decides every transfer (which host fetches
 * which piece from which parent or the origin) and never does I/O: time comes in as `nowMs`, every
 * random choice comes from its own seeded generator, and the shell (simulator or scheduler service)
 * moves the bytes.
 *
 * Data flow. Inputs (`addHost`, `removeHost`, `handleTransfer`, `handleTransferEnding`, `prioritize`,
 * `handleTimeout`; in ring mode `setRing` and `handleHeld`, ring-plan.ts) update the piece maps and mark who may have new work: a host whose download slot
 * freed goes on the ready queue; a parent whose upload slot freed, or that gained a piece, goes on
 * the offer queue. Outputs are pulled: `pollAssignments` first lets the origin hand first copies to
 * idle hosts, then plans every ready host, then lets each parent on the offer queue offer a piece to
 * parked hosts (hungry, but nothing fetchable when last planned). So each event re-plans only the
 * hosts it concerns.
 *
 * Planning one host fills its free download slots in this order: pieces a loader is waiting for,
 * a first copy from the origin, the rarest piece some eligible parent holds, and in the tail a
 * hedge. In a large swarm where hosts' own searches mostly fail (every holder of the rare pieces
 * busy), searches are cut short and the offers do the matching.
 *
 * The policies live in their own modules: rarity.ts and piece-select.ts (rarest-first), origin.ts
 * (first copies), parent-search.ts and parent-score.ts (which parent), racks.ts (when a host in a
 * rack may fetch from another rack), offer.ts (what a free parent offers), priority.ts (lazy
 * loading); the state in bitfield.ts, holders.ts, in-flight.ts, transfers.ts, parked.ts and
 * int-set.ts. This file composes them and owns the per-host state.
 *
 * Costs, per transfer (assignment plus report): O(1) index updates, plus a bounded search: at most
 * WALK_PARENT_CHECKS_MAX parent lookups, each one AND per 32 hosts; no allocation but the
 * Assignment itself. Memory: about 2 bits per (host, piece) plus O(pieces + hosts).
 */

import { assert } from '../../errors.js';
import { hasBit, lowestBit, newBitfield, setBit } from './bitfield.js';
import { HolderBits } from './holders.js';
import { InFlightPieces } from './in-flight.js';
import { IntSet } from './int-set.js';
import { OriginPolicy } from './origin.js';
import { rarestInWindow, RecentPieces } from './offer.js';
import { ParkedHosts } from './parked.js';
import { ParentRecords, type CorruptVerdict } from './parent-score.js';
import { ParentSearch } from './parent-search.js';
import {
  missingListMax,
  MissingLists,
  Pick,
  pickByWalk,
  pickFromMissing,
  MISSING_PARENT_CHECKS_MAX,
  MISSING_WINDOW,
  MISSING_WINDOW_SMALL_SWARM,
  WALK_PARENT_CHECKS_MAX,
  type HostPieces,
} from './piece-select.js';
import { PriorityQueues } from './priority.js';
import { RackCrossings } from './racks.js';
import { Random } from './random.js';
import { RarityIndex } from './rarity.js';
import { Rechecks, type Recheck } from './recheck.js';
import { RingEntries } from './ring-entries.js';
import { TransferTable } from './transfers.js';
import {
  ORIGIN,
  RING_PARENTS_DEFAULT,
  type Assignment,
  type HostId,
  type HostSpec,
  type SwarmConfig,
  type SwarmStats,
  type TransferReport,
} from './types.js';

/** ringParents: bitfield words (32 pieces each) a ring parent's offer is chosen from. */
const RING_WINDOW_WORDS = 32;
/** ringParents: host ids after a host's own examined for its ring (a bound when few share its rack). */
/** Ring mode: pieces of a ring's entries a fed host tries per planning step. */
const RING_ENTRY_TRIES = 8;
const RING_IDS_EXAMINED_MAX = 1024;
/** Host ids are array indices: at most this many. */
export const HOSTS_MAX = 1 << 16;
/** Parked hosts tried per free upload slot of a parent on the offer queue, and misses in a row allowed. */
const OFFER_TRIES_PER_SLOT = 2;
const OFFER_MISSES_MAX = 2;
/**
 * Short searches (see searchesShort): below this share of successful host searches (a moving
 * average with this weight), in a swarm of at least this many hosts; then one search in
 * SHORT_SEARCH_PROBE_EVERY still looks up this many parents, the others none.
 */
const WALK_SUCCESS_LOW = 0.25;
const WALK_SUCCESS_WEIGHT = 1 / 64;
const SHORT_SEARCH_HOSTS_MIN = 64;
const SHORT_SEARCH_PROBE_EVERY = 8;
const WALK_PARENT_CHECKS_FUTILE = 2;
/** Queued priority pieces looked at per planning step. */
const PRIORITY_EXAMINED_MAX = 64;
/** Parked hosts re-planned per sweep (the periodic safety net against a wake-up that never came). */
const SWEEP_HOSTS_MAX = 64;
const SWEEP_INTERVAL_MS_DEFAULT = 1000;
/**
 * Corrupt reports a distrusted host may go on making before the core stops planning for it (and
 * the shell removes it): every piece it gets fails its check, so feeding it more only burns its
 * parents' uploads (a liar, or a host whose memory or disk corrupts what it receives).
 */
export const IGNORED_REPORTS_EJECT = 8;
/**
 * Re-checks (recheck.ts): parked hosts tried first as the prober, hosts looked at per re-check, and
 * per poll for all of them (a queue that finds no prober costs little on every poll).
 */
const PROBER_PARKED_TRIES = 4;
const PROBER_LOOKS_PER_RECHECK = 256;
const PROBER_LOOKS_MAX = 1024;
/**
 * Failed transfers in a row from one parent to one host after which the host bans that parent for
 * itself, as after a corrupt one: a parent it cannot reach (a certificate it does not trust, an
 * address it cannot route to) while the scheduler can was otherwise assigned to it for ever, ~2000
 * times a second, when it alone held the pieces; with every holder banned the origin serves them.
 * A verified transfer from the parent starts the count again.
 */
export const PAIR_FAILURES_BAN = 8;
/** Downloads at once for a host blamed for corrupt uploads (downloadsLimit). */
const BLAMED_DOWNLOADS_MAX = 2;
const NONE = -1;

export class SwarmCore {
  readonly stats: SwarmStats = {
    originBytesAssigned: 0,
    transfersAssigned: 0,
    transfersVerified: 0,
    transfersCorrupt: 0,
    transfersFailed: 0,
    transfersCancelled: 0,
    parentsBannedAfterFailures: 0,
    hedgesAssigned: 0,
    hostsComplete: 0,
    rechecksStarted: 0,
    rechecksRefuted: 0,
    rechecksConfirmed: 0,
  };

  private readonly pieceCount: number;
  private readonly pieceBytes: number;
  private readonly lastPieceBytes: number;
  private readonly downloadsMax: number;
  private readonly uploadsMax: number;
  private readonly hedgeTailPieces: number;
  private readonly sweepIntervalMs: number;
  private readonly missingListMax: number;

  private readonly random: Random;
  private readonly rarity: RarityIndex;
  private readonly holders: HolderBits;
  private readonly transfers: TransferTable;
  private readonly parents = new ParentRecords();
  private readonly origin: OriginPolicy;
  private readonly priority: PriorityQueues;
  private readonly missing = new MissingLists();
  private readonly inFlight: InFlightPieces;
  private readonly search: ParentSearch;
  private readonly crossings: RackCrossings;
  private readonly rechecks = new Rechecks();
  /** Failed transfers in a row per (host, parent): key host * HOSTS_MAX + parent (PAIR_FAILURES_BAN). */
  private readonly pairFailures = new Map<number, number>();
  private readonly ringEntries: RingEntries;
  /** Per host: corrupt reports made after it was distrusted (see IGNORED_REPORTS_EJECT). */
  private ignoredReports = new Int32Array(0);

  /** Per host: held pieces (undefined while absent), how many, present, seed. */
  private held: Array<Uint32Array | undefined> = [];
  /** SwarmConfig.ringParents: fixed parents per host, 0 when off. */
  private readonly ringParents: number;
  /** SwarmConfig.ringChain. */
  private readonly ringChain: boolean;
  private heldCounts = new Int32Array(0);
  private present = new Uint8Array(0);
  /**
   * Per host: fed by a ring parent's pushes (setRing). The core then plans for it only what its ring
   * does not bring: the pieces a loader waits for, first copies from the origin, and the ring's
   * entries (ring-entries.ts).
   */
  private ringFed = new Uint8Array(0);
  private seed = new Uint8Array(0);
  private readonly zoneIds = new Map<string, number>();
  private readonly rackIds = new Map<string, number>();
  private readonly recent = new RecentPieces();
  private hostsDownloading = 0;
  private hostsPresent = 0;

  /** Hosts to plan at the next poll, hungry hosts that found nothing, parents with something to offer. */
  private readonly ready = new IntSet(64);
  private readonly parked = new ParkedHosts();
  private readonly offers = new IntSet(64);

  private assignments: Assignment[] = [];
  private cancellations: number[] = [];
  private nowMs = 0;
  private nextSweepMs: number | undefined;
  private readonly pick = new Pick();
  /** Moving average of how often a host's own rarest-first search found something. */
  private walkSuccess = 1;
  private shortSearches = 0;
  private readonly target: HostPieces = {
    host: NONE,
    held: new Uint32Array(0),
    inFlight: new InFlightPieces(1),
  };

  constructor(config: SwarmConfig) {
    validateConfig(config);
    this.pieceCount = config.pieceCount;
    this.pieceBytes = config.pieceBytes;
    this.lastPieceBytes = config.totalBytes - (config.pieceCount - 1) * config.pieceBytes;
    this.downloadsMax = config.downloadsPerHostMax;
    this.ringParents = config.ringParents ?? RING_PARENTS_DEFAULT;
    this.ringChain = config.ringChain === true;
    this.uploadsMax = config.uploadsPerHostMax;
    this.hedgeTailPieces = config.hedgeTailPieces;
    this.sweepIntervalMs = config.sweepIntervalMs ?? SWEEP_INTERVAL_MS_DEFAULT;
    this.missingListMax = missingListMax(config.pieceCount);
    this.random = new Random(config.randomSeed);
    this.rarity = new RarityIndex(config.pieceCount, HOSTS_MAX, this.random);
    this.holders = new HolderBits(config.pieceCount);
    this.transfers = new TransferTable(1024);
    this.ringEntries = new RingEntries(config.pieceCount);
    this.crossings = new RackCrossings(config.originReadersMax, this.rarity);
    this.search = new ParentSearch(
      this.holders,
      this.transfers,
      this.parents,
      this.random,
      config.uploadsPerHostMax,
      this.crossings,
    );
    this.origin = new OriginPolicy(
      config.pieceCount,
      config.originReadersMax,
      config.originReadersPerHostMax,
    );
    this.priority = new PriorityQueues(config.pieceCount);
    // Live transfers (the slots, plus the ring slot while reading the origin) and, per slot, one
    // ending transfer besides the one that replaced it.
    this.inFlight = new InFlightPieces(2 * config.downloadsPerHostMax + 1);
    this.target.inFlight = this.inFlight;
  }

  // ---- inputs -------------------------------------------------------------------------------------

  addHost(nowMs: number, spec: HostSpec, held?: Iterable<number>): void {
    this.tick(nowMs);
    const host = spec.id;
    assert(Number.isInteger(host) && host >= 0 && host < HOSTS_MAX, `host id ${host} out of range`);
    if (this.isPresent(host)) this.removeHost(nowMs, host);
    this.ensureHosts(host + 1);
    const bitfield = newBitfield(this.pieceCount);
    this.held[host] = bitfield;
    this.present[host] = 1;
    this.ringFed[host] = 0;
    this.seed[host] = spec.seed === true ? 1 : 0;
    const zone = labelId(this.zoneIds, spec.zone);
    const rack =
      spec.rack === undefined ? NONE : labelId(this.rackIds, `${spec.zone ?? ''}\u0000${spec.rack}`);
    this.search.join(host, zone, rack);
    this.origin.join(host);
    this.parked.setLabels(host, rack, zone);
    this.parents.reset(host, Math.max(0, spec.uploadBytesPerSecond));
    this.hostsPresent++;
    this.recent.clear(host);
    this.heldCounts[host] =
      spec.seed === true ? this.fillAll(bitfield) : fillFrom(bitfield, held, this.pieceCount);
    this.inFlight.clearHost(host);
    if (this.parents.banned[host] !== 1) this.countCopies(host, +1);
    if (this.heldCounts[host] === this.pieceCount) this.stats.hostsComplete += this.seed[host] === 1 ? 0 : 1;
    else this.hostsDownloading++;
    if (this.isDownloading(host)) this.ready.add(host);
    this.refreshUploader(host);
    this.offers.add(host);
  }

  removeHost(nowMs: number, host: HostId): void {
    this.tick(nowMs);
    if (!this.isPresent(host)) return;
    for (let slot = this.transfers.firstDownload(host); slot !== NONE;) {
      const next = this.transfers.nextDownload(slot);
      this.rechecks.retry(this.rechecks.take(this.transfers.idOf(slot)));
      this.finishTransfer(slot);
      slot = next;
    }
    for (let slot = this.transfers.firstUpload(host); slot !== NONE;) {
      const next = this.transfers.nextUpload(slot);
      const downloader = this.transfers.host[slot]!;
      this.rechecks.take(this.transfers.idOf(slot));
      this.finishTransfer(slot);
      if (this.isDownloading(downloader)) this.ready.add(downloader);
      slot = next;
    }
    this.ringEntries.setRing(host, NONE, this.piecesOf(host), (piece) => this.rarity.count[piece]! > 0);
    if (this.parents.banned[host] !== 1) this.countCopies(host, -1);
    if (this.isDownloading(host)) this.hostsDownloading--;
    else if (this.seed[host] === 0) this.stats.hostsComplete--;
    this.present[host] = 0;
    this.ringFed[host] = 0;
    this.hostsPresent--;
    this.held[host] = undefined;
    this.heldCounts[host] = 0;
    this.missing.drop(host);
    this.priority.clear(host);
    this.ready.delete(host);
    this.parked.delete(host);
    this.offers.delete(host);
    this.search.leave(host);
    // The scheduler gives an unblamed host's id to the next host that joins: bans of it (failures,
    // a lone accuser's) must not follow the id to a host that did nothing.
    if (!this.parents.isBlamed(host)) this.search.forgetBansOf(host);
    for (const key of this.pairFailures.keys()) {
      if (Math.floor(key / HOSTS_MAX) === host || key % HOSTS_MAX === host) this.pairFailures.delete(key);
    }
  }

  /** One more failed transfer from `parent` to `host` in a row; the PAIR_FAILURES_BAN-th bans it for `host`. */
  private countPairFailure(host: number, parent: number): void {
    const key = host * HOSTS_MAX + parent;
    const failures = (this.pairFailures.get(key) ?? 0) + 1;
    if (failures < PAIR_FAILURES_BAN) {
      this.pairFailures.set(key, failures);
      return;
    }
    this.pairFailures.delete(key);
    if (this.search.isBannedFor(host, parent)) return;
    this.search.ban(host, parent);
    this.stats.parentsBannedAfterFailures++;
  }

  handleTransfer(nowMs: number, report: TransferReport): void {
    this.tick(nowMs);
    const slot = this.transfers.slotOf(report.transferId);
    // A report for a transfer dropped by removeHost (or reported twice) changes nothing.
    if (slot === NONE) return;
    const host = this.transfers.host[slot]!;
    const piece = this.transfers.piece[slot]!;
    const from = this.transfers.from[slot]!;
    const recheck = this.rechecks.take(report.transferId);
    this.finishTransfer(slot);
    switch (report.outcome) {
      case 'verified':
        this.stats.transfersVerified++;
        if (from !== ORIGIN) {
          this.recordVerified(from, report.bytesPerSecond, host);
          if (this.pairFailures.size > 0) this.pairFailures.delete(host * HOSTS_MAX + from);
        }
        if (recheck !== undefined) this.refute(recheck);
        this.gainPiece(host, piece);
        break;
      case 'corrupt':
        this.stats.transfersCorrupt++;
        if (recheck === undefined) {
          // Counted whatever the source: a host that garbles what it receives fails the origin's
          // pieces too, and would otherwise fetch them from the origin for ever.
          if (this.parents.distrusted[host] === 1) this.ignoredReports[host]!++;
          if (from !== ORIGIN) this.onCorrupt(host, from, piece);
        } else if (this.parents.vouched(host)) {
          this.confirm(recheck.parent, host);
        } else {
          // A prober no other host vouches for yet (it may be the accuser's accomplice) accuses
          // like any reporter (and is re-checked in turn) and confirms once one does; meanwhile
          // another host re-checks (this one has banned the parent).
          this.onCorrupt(host, from, piece);
          this.rechecks.defer(from, host);
          this.rechecks.retry(recheck, false);
        }
        break;
      case 'failed':
        this.stats.transfersFailed++;
        if (from !== ORIGIN) {
          this.parents.recordFailed(from);
          this.countPairFailure(host, from);
        }
        this.rechecks.retry(recheck);
        break;
      case 'cancelled':
        this.stats.transfersCancelled++;
        this.rechecks.retry(recheck);
        break;
    }
    if (this.isDownloading(host)) this.ready.add(host);
  }

  /**
   * The shell expects `transferId` to finish within about one request latency (its remaining bytes
   * at its current rate): the transfer's download and upload slots are planned again now, so the
   * next request overlaps its last bytes (request pipelining) instead of leaving both links idle
   * for a round trip. The piece stays in flight until the transfer is reported. A hint for an
   * unknown, finished, cancelled or already ending transfer changes nothing, and so does one for a
   * host already ending downloadsPerHostMax transfers (which bounds its transfers in flight).
   */
  /**
   * Ring mode: a push of `piece` from `parent` failed `host`'s check, and the shell settled that
   * the parent sent it (it did not pass it on from its own parent): weighed as a corrupt transfer
   * from the parent is, so `host` fetches nothing more from it and a third host re-checks it.
   */
  handleCorruptPush(nowMs: number, host: HostId, parent: HostId, piece: number): void {
    this.tick(nowMs);
    if (host === parent || !this.isPresent(host) || !this.isPresent(parent)) return;
    if (!Number.isInteger(piece) || piece < 0 || piece >= this.pieceCount) return;
    this.stats.transfersCorrupt++;
    if (this.parents.distrusted[host] === 1) this.ignoredReports[host]!++;
    this.onCorrupt(host, parent, piece);
  }

  handleTransferEnding(nowMs: number, transferId: number): void {
    this.tick(nowMs);
    const slot = this.transfers.slotOf(transferId);
    if (slot === NONE || this.transfers.isEnding(slot) || this.transfers.isCancelled(slot)) return;
    const host = this.transfers.host[slot]!;
    if (this.transfers.endingDownloads[host]! >= this.downloadsMax) return;
    const from = this.transfers.from[slot]!;
    this.transfers.markEnding(slot);
    if (from === ORIGIN) {
      this.origin.end(host);
    } else {
      this.refreshUploader(from);
      this.offers.add(from);
    }
    if (this.isDownloading(host)) this.ready.add(host);
  }

  prioritize(nowMs: number, host: HostId, pieces: readonly number[]): void {
    this.tick(nowMs);
    if (!this.isDownloading(host)) return;
    if (this.priority.add(host, pieces, this.held[host]!) > 0) this.ready.add(host);
  }

  /**
   * `host` verified `pieces` that came by no transfer of the core's (pushed along a ring by its ring
   * parent, ring-plan.ts): they count as held and as copies from now on, and copies of them still
   * in flight to `host` are cancelled. Pieces already held, out of range, or of an absent host
   * change nothing.
   */
  handleHeld(nowMs: number, host: HostId, pieces: Iterable<number>): void {
    this.tick(nowMs);
    if (!this.isDownloading(host)) return;
    for (const piece of pieces) {
      if (!Number.isInteger(piece) || piece < 0 || piece >= this.pieceCount) continue;
      this.gainPiece(host, piece);
      if (!this.isDownloading(host)) break;
    }
    if (this.isDownloading(host)) this.ready.add(host);
  }

  /**
   * `host`'s ring (ring-plan.ts; -1: none) and whether a ring parent feeds it. While fed, the core
   * assigns the host only the pieces a loader waits for (prioritize), first copies from the origin,
   * and its ring's entries (pieces no member holds or fetches, from a host outside the ring): every
   * other piece reaches it through the ring, and neither its own searches, the offers of free
   * parents nor hedges give it a second way. Not fed (alone in its ring, or cut), it is planned as
   * usual; its pieces still count for its ring, as it feeds its own child.
   */
  setRing(nowMs: number, host: HostId, ring: number, fed: boolean): void {
    this.tick(nowMs);
    if (!this.isPresent(host)) return;
    assert(Number.isInteger(ring) && ring >= -1, `ring ${ring} must be a ring id or -1`);
    this.ringFed[host] = fed && ring >= 0 ? 1 : 0;
    this.ringEntries.setRing(host, ring, this.piecesOf(host), (piece) => this.rarity.count[piece]! > 0);
    if (this.isDownloading(host)) this.ready.add(host);
  }

  handleTimeout(nowMs: number): void {
    this.tick(nowMs);
    if (this.nextSweepMs === undefined || nowMs < this.nextSweepMs) return;
    this.nextSweepMs = undefined;
    for (let tries = Math.min(SWEEP_HOSTS_MAX, this.parked.size); tries > 0; tries--) {
      const host = this.parked.random(this.random);
      if (this.worthPlanning(host)) this.ready.add(host);
    }
  }

  // ---- outputs ------------------------------------------------------------------------------------

  pollAssignments(nowMs: number): Assignment[] {
    this.tick(nowMs);
    if (this.rechecks.pending > 0) this.runRechecks();
    this.fillOrigin();
    this.wakeRingMembers();
    while (this.ready.size > 0) this.plan(this.ready.pop());
    this.runOffers();
    // With nothing in flight no report will ever wake a parked host: plan them all now.
    if (this.transfers.inFlight === 0 && this.parked.size > 0) this.planAllParked();
    if (this.parked.size > 0 && this.nextSweepMs === undefined)
      this.nextSweepMs = this.nowMs + this.sweepIntervalMs;
    const out = this.assignments;
    this.assignments = [];
    return out;
  }

  pollCancellations(): number[] {
    const out = this.cancellations;
    this.cancellations = [];
    return out;
  }

  pollTimeout(): number | undefined {
    return this.parked.size > 0 ? this.nextSweepMs : undefined;
  }

  // ---- queries ------------------------------------------------------------------------------------

  hasPiece(host: HostId, piece: number): boolean {
    const held = this.held[host];
    return held !== undefined && piece >= 0 && piece < this.pieceCount && hasBit(held, piece);
  }

  /** True when `parent` holds some piece that `host` lacks (both present). A scan of both bitfields. */
  holdsMissing(parent: HostId, host: HostId): boolean {
    const from = this.held[parent];
    const to = this.held[host];
    if (from === undefined || to === undefined) return false;
    for (let w = 0; w < from.length; w++) if ((from[w]! & ~to[w]!) !== 0) return true;
    return false;
  }

  isRingFed(host: HostId): boolean {
    return this.isPresent(host) && this.ringFed[host] === 1;
  }

  /** Pieces no member of `ring` holds or fetches that some host outside it holds. */
  ringLacking(ring: number): number {
    return this.ringEntries.lacking(ring)?.size ?? 0;
  }

  heldCount(host: HostId): number {
    return this.isPresent(host) ? this.heldCounts[host]! : 0;
  }

  isComplete(host: HostId): boolean {
    return this.isPresent(host) && this.heldCounts[host] === this.pieceCount;
  }

  /** Copies of `piece` among hosts that may serve it (banned parents are not counted). */
  copies(piece: number): number {
    return this.rarity.count[piece] ?? 0;
  }

  /** Parents `host` has banned for itself: they sent it corrupt bytes, or failed it PAIR_FAILURES_BAN times in a row. */
  bannedParents(host: HostId): number[] {
    return this.isPresent(host) ? this.search.bannedBy(host) : [];
  }

  /** True when `parent` is banned for everyone (corrupt bytes, confirmed by a re-check: recheck.ts). */
  isBanned(parent: HostId): boolean {
    return this.parents.banned[parent] === 1;
  }

  /**
   * True when `host` carries a mark of blame (banned, demoted as corrupt, or distrusted): the shell
   * must give its id to no other host, and the same host back its id when it returns.
   */
  isBlamed(host: HostId): boolean {
    return this.parents.isBlamed(host);
  }

  /**
   * True when `host`, distrusted, went on reporting corrupt bytes (IGNORED_REPORTS_EJECT times): the
   * core plans nothing more for it, and the shell should remove it with a clear error.
   */
  isEjected(host: HostId): boolean {
    return (this.ignoredReports[host] ?? 0) >= IGNORED_REPORTS_EJECT;
  }

  /** True when `parent` ranks below every healthy parent (slow, failing or reported corrupt). */
  isDemoted(parent: HostId): boolean {
    return this.parents.isDemoted(parent);
  }

  /** How `host` would rank `parent` now (higher is better), or -1 if it may not fetch from it. */
  parentScore(host: HostId, parent: HostId): number {
    if (!this.isPresent(host) || !this.isPresent(parent)) return -1;
    return this.search.score(host, parent, NONE);
  }

  // ---- self-check ---------------------------------------------------------------------------------

  /**
   * Asserts that every derived structure agrees with the ground truth it is derived from: the held
   * bitfields (piece counts, holder rows, copy counts, the rarity order, free uploaders) and the
   * transfer lists (slot counts, pieces in flight, origin readers), and that parked hosts are
   * hungry. O(hosts x pieces): for tests and debugging, never on a hot path.
   */
  checkInvariants(): void {
    const inFlight = this.checkTransfers();
    const copies = new Int32Array(this.pieceCount);
    let freeUploaders = 0;
    let downloading = 0;
    for (let host = 0; host < this.present.length; host++) {
      const present = this.present[host] === 1;
      const held = this.held[host];
      const counted = present && this.parents.banned[host] !== 1;
      let heldCount = 0;
      for (let piece = 0; piece < this.pieceCount; piece++) {
        const has = held !== undefined && hasBit(held, piece);
        if (has) heldCount++;
        if (has && counted) copies[piece]!++;
        if (this.holders.has(piece, host) !== (has && counted))
          assert(false, `holder bit of ${piece} at ${host}`);
      }
      if (present !== (held !== undefined))
        assert(false, `host ${host}: present but no bitfield, or the reverse`);
      if (this.heldCounts[host] !== heldCount)
        assert(false, `host ${host}: held count ${this.heldCounts[host]}`);
      const free =
        present &&
        heldCount > 0 &&
        this.parents.banned[host] !== 1 &&
        this.transfers.uploads[host]! < this.uploadsMax;
      if (this.search.isFree(host) !== free) assert(false, `host ${host}: free-uploader bit is ${!free}`);
      if (free) freeUploaders++;
      if (present && heldCount < this.pieceCount) downloading++;
      if (this.parked.has(host)) {
        if (!this.isDownloading(host)) assert(false, `host ${host} is parked but not downloading`);
        if (this.transfers.downloads[host]! >= this.downloadsLimit(host))
          assert(false, `host ${host} is parked with no free slot`);
      }
      for (let piece = 0; present && piece < this.pieceCount; piece++) {
        const expected = inFlight.get(host * this.pieceCount + piece) ?? 0;
        if (this.inFlight.count(host, piece) !== expected)
          assert(false, `host ${host}: piece ${piece} in flight`);
      }
    }
    for (let piece = 0; piece < this.pieceCount; piece++)
      if (this.rarity.count[piece] !== copies[piece])
        assert(false, `piece ${piece}: ${this.rarity.count[piece]} copies`);
    this.rarity.checkOrder();
    this.checkRingEntries(inFlight);
    if (this.search.freeUploaders !== freeUploaders)
      assert(false, `free uploaders: ${this.search.freeUploaders}`);
    if (this.hostsDownloading !== downloading) assert(false, `hosts downloading: ${this.hostsDownloading}`);
  }

  /**
   * Recounts the transfer lists against the per-host slot counts and the origin's readers; returns
   * the transfers in flight per (host, piece), keyed host * pieceCount + piece.
   */
  private checkTransfers(): Map<number, number> {
    const perPiece = new Map<number, number>();
    const originPerPiece = new Map<number, number>();
    const intoRack = new Map<number, number>();
    let total = 0;
    let originActive = 0;
    for (let host = 0; host < this.present.length; host++) {
      let downloads = 0;
      let ending = 0;
      let fromOrigin = 0;
      for (
        let slot = this.transfers.firstDownload(host);
        slot !== NONE;
        slot = this.transfers.nextDownload(slot)
      ) {
        const piece = this.transfers.piece[slot]!;
        const isEnding = this.transfers.isEnding(slot);
        total++;
        if (isEnding) ending++;
        else downloads++;
        perPiece.set(host * this.pieceCount + piece, (perPiece.get(host * this.pieceCount + piece) ?? 0) + 1);
        if (this.crossesRacks(host, this.transfers.from[slot]!)) {
          const key = this.search.rackOf(host) * this.pieceCount + piece;
          intoRack.set(key, (intoRack.get(key) ?? 0) + 1);
        }
        if (this.transfers.from[slot] !== ORIGIN) continue;
        originPerPiece.set(piece, (originPerPiece.get(piece) ?? 0) + 1);
        if (!isEnding) fromOrigin++;
      }
      originActive += fromOrigin;
      let uploads = 0;
      for (
        let slot = this.transfers.firstUpload(host);
        slot !== NONE;
        slot = this.transfers.nextUpload(slot)
      ) {
        if (!this.transfers.isEnding(slot)) uploads++;
      }
      if (this.transfers.downloads[host] !== downloads)
        assert(false, `host ${host}: ${downloads} downloads listed`);
      if (this.transfers.endingDownloads[host] !== ending)
        assert(false, `host ${host}: ${ending} ending listed`);
      if (this.transfers.uploads[host] !== uploads) assert(false, `host ${host}: ${uploads} uploads listed`);
      if (this.origin.transfersTo(host) !== fromOrigin)
        assert(false, `host ${host}: ${fromOrigin} origin transfers`);
    }
    if (this.transfers.inFlight !== total)
      assert(false, `${total} transfers listed, ${this.transfers.inFlight} counted`);
    if (this.origin.active !== originActive)
      assert(false, `origin readers: ${this.origin.active}, listed ${originActive}`);
    for (let piece = 0; piece < this.pieceCount; piece++) {
      const expected = originPerPiece.get(piece) ?? 0;
      if (this.origin.inFlight(piece) !== expected)
        assert(false, `piece ${piece}: origin transfers in flight`);
    }
    this.checkRackEntries(intoRack);
    return perPiece;
  }

  /** Recounts the pieces on their way into each rack (racks.ts) from `intoRack`, keyed rack * pieceCount + piece. */
  /** Every ring's counts are its members' held pieces plus their transfers in flight. */
  private checkRingEntries(inFlight: Map<number, number>): void {
    const counts = new Map<number, Int32Array>();
    for (let host = 0; host < this.present.length; host++) {
      const ring = this.ringEntries.ringOf(host);
      if (ring === NONE) continue;
      if (this.present[host] !== 1) assert(false, `host ${host} left but is in ring ${ring}`);
      let count = counts.get(ring);
      if (count === undefined) counts.set(ring, (count = new Int32Array(this.pieceCount)));
      for (let piece = 0; piece < this.pieceCount; piece++) {
        count[piece]! +=
          (hasBit(this.held[host]!, piece) ? 1 : 0) + (inFlight.get(host * this.pieceCount + piece) ?? 0);
      }
    }
    for (const [ring, count] of counts) {
      const copies = this.ringEntries.copiesOf(ring)!;
      for (let piece = 0; piece < this.pieceCount; piece++)
        if (copies[piece] !== count[piece])
          assert(false, `ring ${ring}: piece ${piece} counted ${copies[piece]}`);
    }
    this.ringEntries.check((piece) => this.rarity.count[piece]! > 0);
  }

  private checkRackEntries(intoRack: Map<number, number>): void {
    const perRack = new Int32Array(this.rackIds.size);
    for (const [key, count] of intoRack) {
      const rack = Math.floor(key / this.pieceCount);
      const piece = key % this.pieceCount;
      perRack[rack]! += count;
      if (this.crossings.comingCount(rack, piece) !== count)
        assert(
          false,
          `rack ${rack}: piece ${piece} on its way in ${this.crossings.comingCount(rack, piece)} times`,
        );
    }
    for (let rack = 0; rack < perRack.length; rack++)
      if (this.crossings.entering(rack) !== perRack[rack])
        assert(false, `rack ${rack}: ${this.crossings.entering(rack)} pieces on their way in`);
  }

  // ---- planning -----------------------------------------------------------------------------------

  /** Fills `host`'s free download slots; parks it if some stay free. */
  private plan(host: number): void {
    if (!this.isDownloading(host) || this.isEjected(host)) {
      this.parked.delete(host);
      return;
    }
    const limit = this.downloadsLimit(host);
    while (this.transfers.downloads[host]! < limit && this.assignOne(host));
    if (this.transfers.downloads[host]! < limit) {
      this.parked.add(host);
      return;
    }
    this.parked.delete(host);
    // The slot beyond downloadsPerHostMax, while the host reads the origin, is for a ring parent only
    // (parked hosts, offers and the scored choice never see it).
    if (
      this.ringParents > 0 &&
      this.ringFed[host] === 0 &&
      this.transfers.downloads[host]! < this.downloadSlots(host)
    )
      this.assignRing(host);
  }

  private assignOne(host: number): boolean {
    if (this.priority.length(host) > 0 && this.assignPriority(host)) return true;
    if (this.originMayServe(host) && this.assignFirstCopy(host)) return true;
    if (this.ringFed[host] === 1) return !this.ringChain && this.assignRingEntry(host);
    if (this.ringParents > 0 && this.assignRing(host)) return true;
    if (this.search.freeUploaders > 0 && this.lackingAvailable(host) > 0 && this.assignRarest(host))
      return true;
    return this.lacking(host) <= this.hedgeTailPieces && this.assignHedge(host);
  }

  private assignPriority(host: number): boolean {
    const held = this.held[host]!;
    this.priority.dropHeldHead(host, held);
    const examined = Math.min(this.priority.length(host), PRIORITY_EXAMINED_MAX);
    for (let i = 0; i < examined; i++) {
      const piece = this.priority.at(host, i);
      if (hasBit(held, piece) || this.inFlight.has(host, piece)) continue;
      if (this.rarity.count[piece] === 0) {
        if (!this.origin.hasFreeReader() || this.origin.inFlight(piece) > 0) continue;
        this.start(host, piece, ORIGIN, false);
        return true;
      }
      const parent = this.search.findParentAnywhere(host, piece);
      if (parent === NONE) continue;
      this.start(host, piece, parent, false);
      return true;
    }
    return false;
  }

  private assignFirstCopy(host: number): boolean {
    const piece = this.origin.pickUnserved(this.rarity, this.random, this.held[host]!);
    if (piece === NONE) return false;
    this.start(host, piece, ORIGIN, false);
    return true;
  }

  private assignRarest(host: number): boolean {
    const target = this.targetOf(host);
    const pick = this.pick;
    const listed = this.useMissingList(host);
    const checksMax = this.searchChecks(listed ? MISSING_PARENT_CHECKS_MAX : WALK_PARENT_CHECKS_MAX);
    if (checksMax === 0) return false;
    let found: boolean;
    if (listed) {
      this.prepareMissingList(host);
      found = pickFromMissing(
        this.missing,
        this.rarity,
        target,
        this.random,
        this.search,
        pick,
        checksMax,
        this.missingWindow(),
      );
    } else {
      found = pickByWalk(this.rarity, target, this.random, this.search, pick, checksMax, Infinity);
    }
    this.walkSuccess += ((found ? 1 : 0) - this.walkSuccess) * WALK_SUCCESS_WEIGHT;
    if (found) {
      this.start(host, pick.piece, pick.parent, false);
      return true;
    }
    return listed && this.search.hasBans(host) && this.assignAfterBans(host);
  }

  /**
   * Searches are kept short in a swarm large enough for them to be costly (a parent search scans a
   * row of host bits) and only while most of them fail (every holder of the rare pieces busy, as
   * while the swarm waits on the origin): longer searches would find the same, and parents offer
   * their pieces as their slots free. A small swarm always searches in full, so its choices are
   * exactly rarest-first.
   */
  private searchesShort(): boolean {
    return this.hostsPresent >= SHORT_SEARCH_HOSTS_MIN && this.walkSuccess < WALK_SUCCESS_LOW;
  }

  /**
   * Parent lookups a host's own search may make: `full`, or while searches are short, none, except
   * that one search in SHORT_SEARCH_PROBE_EVERY still probes, so the core notices when searching
   * pays again.
   */
  private searchChecks(full: number): number {
    if (!this.searchesShort()) return full;
    return ++this.shortSearches % SHORT_SEARCH_PROBE_EVERY === 0 ? WALK_PARENT_CHECKS_FUTILE : 0;
  }

  /** Missing-list entries one selection reads: all of them in a small swarm, a sample otherwise. */
  private missingWindow(): number {
    return this.hostsPresent < SHORT_SEARCH_HOSTS_MIN ? MISSING_WINDOW_SMALL_SWARM : MISSING_WINDOW;
  }

  private prepareMissingList(host: number): void {
    const held = this.held[host]!;
    if (!this.missing.has(host)) this.missing.build(host, held, this.pieceCount, this.random);
    this.missing.compact(host, held, this.lacking(host));
  }

  /**
   * The missing list pays off once the host lacks few pieces and most of them are fetchable; while
   * most of what it lacks is still only at the origin, the rare pieces it can fetch are the first
   * ones a walk of the rarity index meets, so walking is cheaper.
   */
  private useMissingList(host: number): boolean {
    const lacking = this.lacking(host);
    return lacking <= this.missingListMax && 2 * this.lackingAvailable(host) >= lacking;
  }

  /**
   * A piece whose every holder is banned for this host can come from nowhere but the origin: this
   * is the origin's "retry after failure" exception to first-copies-only. Only hosts with bans pay
   * for the check, and only in their last few pieces.
   */
  private assignAfterBans(host: number): boolean {
    if (!this.origin.hasFreeReader()) return false;
    const held = this.held[host]!;
    const length = Math.min(this.missing.length(host), PRIORITY_EXAMINED_MAX);
    for (let i = 0; i < length; i++) {
      const piece = this.missing.at(host, i);
      // A piece no counted host holds is a first copy still to send or on its way: the origin's own
      // turns serve it once, and this host fetches it from whoever got it (every host with bans asked
      // the origin for it, as "every holder" of no holder is banned: up to 3 copies of a piece).
      if (
        hasBit(held, piece) ||
        this.inFlight.has(host, piece) ||
        this.rarity.count[piece] === 0 ||
        !this.search.allHoldersBanned(host, piece)
      ) {
        continue;
      }
      this.start(host, piece, ORIGIN, false);
      return true;
    }
    return false;
  }

  /** In the tail: a second transfer, from a different parent, of a piece already in flight. */
  private assignHedge(host: number): boolean {
    const held = this.held[host]!;
    for (
      let slot = this.transfers.firstDownload(host);
      slot !== NONE;
      slot = this.transfers.nextDownload(slot)
    ) {
      // An ending transfer's bytes are nearly all there: a second copy would only arrive later.
      if (this.transfers.isCancelled(slot) || this.transfers.isHedge(slot) || this.transfers.isEnding(slot))
        continue;
      const piece = this.transfers.piece[slot]!;
      if (hasBit(held, piece) || this.inFlight.count(host, piece) > 1) continue;
      const from = this.transfers.from[slot]!;
      const parent = this.search.findParent(host, piece, from);
      if (parent !== NONE) {
        this.start(host, piece, parent, true);
        return true;
      }
      // Only the origin has the piece: hedge from it unless the original already comes from it.
      if (this.rarity.count[piece] === 0 && from !== ORIGIN && this.origin.hasFreeReader()) {
        this.start(host, piece, ORIGIN, true);
        return true;
      }
    }
    return false;
  }

  /**
   * The origin's free readers go to parked (idle) hosts first, so first copies spread; a host whose
   * origin transfer just finished has usually parked too, and waits for its next turn. A host with
   * priority pieces gets those first.
   */
  private fillOrigin(): void {
    if (!this.origin.hasFreeReader() || !this.origin.hasUnserved(this.rarity)) return;
    const cap = this.originPerHostMax();
    for (let tries = 2 * this.origin.readersMax + 8; tries > 0; tries--) {
      if (!this.origin.hasFreeReader() || !this.origin.hasUnserved(this.rarity) || this.parked.size === 0)
        return;
      const host = this.parked.random(this.random);
      // Pieces the host waits for right now come before first copies (a lazy load's next tensor).
      if (this.priority.length(host) > 0 && this.assignPriority(host)) {
        this.parkIfFull(host);
        continue;
      }
      if (
        this.origin.transfersTo(host) >= cap ||
        !this.origin.hasTurn(host, this.hostsDownloading, cap) ||
        !this.mayTakeFirstCopies(host)
      )
        continue;
      if (!this.assignFirstCopy(host)) return;
      this.parkIfFull(host);
    }
  }

  /**
   * Parents whose upload slots freed, or that gained a piece, offer to parked hosts (near ones on
   * every other try): the newest of the parent's recent pieces the host lacks, else the rarest in a
   * window of both bitfields (offer.ts). This is what keeps uploads busy when every holder of the
   * rare pieces is busy: a host's own search then fails, and the slot that frees goes straight to a
   * host that lacks what the parent has.
   */
  private runOffers(): void {
    while (this.offers.size > 0 && this.parked.size > 0) {
      const parent = this.offers.pop();
      if (!this.search.isFree(parent)) continue;
      const rack = this.search.rackOf(parent);
      const zone = this.search.zoneOf(parent);
      let tries = (this.uploadsMax - this.transfers.uploads[parent]!) * OFFER_TRIES_PER_SLOT;
      // A parent whose pieces two waiting hosts in a row already have is unlikely to help a third.
      for (let misses = 0; tries > 0 && misses < OFFER_MISSES_MAX && this.parked.size > 0; tries--) {
        // Every other try looks near the parent first, the rest anywhere: nearby hosts are
        // preferred without being the only ones asked.
        const host =
          tries % 2 === 0 ? this.parked.randomNear(rack, zone, this.random) : this.parked.random(this.random);
        // Hosts whose missing pieces are all in flight (common in the tail) are skipped unread.
        const offerable =
          this.ringFed[host] === 0 &&
          this.lackingAvailable(host) > 0 &&
          !this.search.isBannedFor(host, parent);
        let piece = offerable ? this.offeredPiece(parent, host) : NONE;
        if (piece !== NONE && !this.mayCrossTo(host, parent, piece)) piece = NONE;
        if (piece === NONE) {
          misses++;
          continue;
        }
        misses = 0;
        this.assignOffered(host, piece, parent);
        if (!this.search.isFree(parent)) break;
      }
    }
    this.offers.clear();
  }

  /** A piece `parent` can offer `host` (see offer.ts), or -1. */
  private offeredPiece(parent: number, host: number): number {
    const target = this.targetOf(host);
    const piece = this.recent.newestLacking(parent, target);
    return piece !== NONE ? piece : rarestInWindow(this.held[parent]!, target, this.rarity, this.random);
  }

  /** Whether `host` has a transfer from `parent` that is not ending. */
  private downloadsFrom(host: number, parent: number): boolean {
    for (
      let slot = this.transfers.firstDownload(host);
      slot !== NONE;
      slot = this.transfers.nextDownload(slot)
    ) {
      if (this.transfers.from[slot] === parent && !this.transfers.isEnding(slot)) return true;
    }
    return false;
  }

  /**
   * A piece for `host` from its ring parent: the rarest in a window of the parent's bitfield, else the
   * parent's newest piece `host` lacks. Rarest first keeps the pieces passed along a ring diverse.
   */
  private ringPiece(parent: number, host: number): number {
    const target = this.targetOf(host);
    const piece = rarestInWindow(this.held[parent]!, target, this.rarity, this.random, RING_WINDOW_WORDS);
    return piece !== NONE ? piece : this.recent.newestLacking(parent, target);
  }

  /** `host` takes one offered piece, unless it waits for priority pieces (those come first). */
  private assignOffered(host: number, piece: number, parent: number): void {
    if (this.priority.length(host) === 0 || !this.assignPriority(host)) this.takeOffered(host, piece, parent);
    this.parkIfFull(host);
  }

  /**
   * Takes the offered piece, unless the host's usual search finds a rarer one with a free parent.
   * A search cut short by its limits (every holder of the rarer pieces it looked at busy, or the
   * host holding most rare pieces) still takes the offer: a free parent and a hungry host left idle
   * cost more than a piece a little less rare. While searches are short (a large swarm where they
   * mostly fail) the piece simply comes from the parent that offered it.
   */
  private takeOffered(host: number, piece: number, parent: number): void {
    if (this.searchesShort()) {
      this.start(host, piece, parent, false);
      return;
    }
    const target = this.targetOf(host);
    const pick = this.pick;
    const copies = this.rarity.count[piece]!;
    if (this.useMissingList(host)) {
      this.prepareMissingList(host);
      const window = this.missingWindow();
      const checks = MISSING_PARENT_CHECKS_MAX;
      const found = pickFromMissing(
        this.missing,
        this.rarity,
        target,
        this.random,
        this.search,
        pick,
        checks,
        window,
      );
      if (found && this.rarity.count[pick.piece]! < copies) {
        this.start(host, pick.piece, pick.parent, false);
        return;
      }
    } else if (
      pickByWalk(this.rarity, target, this.random, this.search, pick, WALK_PARENT_CHECKS_MAX, copies)
    ) {
      this.start(host, pick.piece, pick.parent, false);
      return;
    }
    const best = this.search.findParent(host, piece, NONE);
    this.start(host, piece, best !== NONE ? best : parent, false);
  }

  /**
   * Whether `host` is in a rack and `from` (a host or the origin) outside it: a transfer between
   * them crosses the rack's uplink (racks.ts).
   */
  private crossesRacks(host: number, from: number): boolean {
    const rack = this.search.rackOf(host);
    return rack !== NONE && (from === ORIGIN || this.search.rackOf(from) !== rack);
  }

  /** The rack crossing rule (racks.ts) for `host` taking `piece` from parent `from`. */
  private mayCrossTo(host: number, from: number, piece: number): boolean {
    if (!this.crossesRacks(host, from)) return true;
    return this.search.mayCross(host, this.search.rackOf(host), piece);
  }

  private parkIfFull(host: number): void {
    if (this.transfers.downloads[host]! >= this.downloadsLimit(host)) this.parked.delete(host);
  }

  /**
   * Downloads planned for `host` at once: downloadsPerHostMax, or BLAMED_DOWNLOADS_MAX for a host
   * blamed for corrupt uploads (parent-score.ts), which gives little or nothing back: the upload
   * slots it would hold are what the hosts in good standing need to finish at their links' rate
   * (8 hosts, 2 sending corrupt bytes: the honest hosts took 14-15 s instead of 11.6).
   */
  private downloadsLimit(host: number): number {
    return this.parents.blamedForUploads(host)
      ? Math.min(BLAMED_DOWNLOADS_MAX, this.downloadsMax)
      : this.downloadsMax;
  }

  /**
   * A host's download slots: downloadsPerHostMax, and one more while it reads from the origin, for a
   * ring parent only (see plan). The origin's link is shared by every host it serves, so its flows
   * are slow; with that slot a host's ring parents keep all their slots. Filled by any parent, the
   * slot pulled pieces across rack uplinks (rack-constrained simulation 30 s instead of 9 s).
   */
  private downloadSlots(host: number): number {
    return this.downloadsMax + (this.origin.transfersTo(host) > 0 ? 1 : 0);
  }

  private planAllParked(): void {
    for (const host of this.parked.list()) this.plan(host);
  }

  /** Cheap test that planning `host` could assign something (it may still find nothing). */
  private worthPlanning(host: number): boolean {
    if (this.ringFed[host] === 1) return this.priority.length(host) > 0 || this.originMayServe(host);
    return (
      this.priority.length(host) > 0 ||
      this.lackingAvailable(host) > 0 ||
      this.lacking(host) <= this.hedgeTailPieces ||
      this.originMayServe(host)
    );
  }

  private originMayServe(host: number): boolean {
    if (!this.origin.hasFreeReader() || !this.origin.hasUnserved(this.rarity)) return false;
    const cap = this.originPerHostMax();
    return (
      this.origin.transfersTo(host) < cap &&
      this.origin.hasTurn(host, this.hostsDownloading, cap) &&
      this.mayTakeFirstCopies(host)
    );
  }

  /**
   * A host blamed for corrupt uploads takes no first copies while a host in good standing is
   * downloading: the hosts that banned it for themselves cannot fetch what it holds, so a first copy
   * it took would be sent by the origin again (8 hosts, one sending corrupt bytes: the origin sent
   * 1.05-1.08 x S). It gets every piece from peers. The scan runs only for a blamed host, which is rare.
   */
  private mayTakeFirstCopies(host: number): boolean {
    // A fed link of a chain gets everything from its parent; the chain's head takes the first copies.
    if (this.ringChain && this.ringFed[host] === 1) return false;
    if (!this.parents.blamedForUploads(host)) return true;
    for (let other = 0; other < this.present.length; other++) {
      if (
        other !== host &&
        this.isDownloading(other) &&
        !this.isEjected(other) &&
        !this.parents.blamedForUploads(other)
      )
        return false;
    }
    return true;
  }

  private originPerHostMax(): number {
    return this.origin.perHostMax(this.hostsDownloading, this.downloadsMax);
  }

  // ---- parents ------------------------------------------------------------------------------------

  /**
   * `host` got corrupt bytes of `piece` from `parent`: it will not fetch from `parent` again, its
   * report is weighed (parent-score.ts), and unless that settled it, the piece is re-checked by a
   * third host (recheck.ts).
   */
  private onCorrupt(host: number, parent: number, piece: number): void {
    const verdict = this.accuse(host, parent);
    if (verdict !== 'banned' && verdict !== 'ignored') this.rechecks.add(parent, piece, host);
  }

  /** `host` bans `parent` for itself and accuses it; a ban for everyone withdraws the parent. */
  private accuse(host: number, parent: number): CorruptVerdict {
    this.search.ban(host, parent);
    const wasBanned = this.parents.banned[parent] === 1;
    const verdict = this.parents.recordCorrupt(parent, host);
    if (verdict === 'banned' && !wasBanned && this.isPresent(parent)) this.withdrawParent(parent);
    this.replanAfterVerdict(parent);
    return verdict;
  }

  /** A re-check's probe verified: the accusation is withdrawn and its maker distrusted. */
  private refute(recheck: Recheck): void {
    this.stats.rechecksRefuted++;
    this.parents.refute(recheck.parent, recheck.accuser);
    this.replanAfterVerdict(recheck.parent);
  }

  /**
   * A re-check's probe got corrupt bytes too: confirmed, and the prober is one more accuser (a
   * parent that served no one else is banned; one that served many is not, since the core may have
   * picked a host colluding with the accuser).
   */
  private confirm(parent: number, prober: number): void {
    this.stats.rechecksConfirmed++;
    this.search.ban(prober, parent);
    const wasBanned = this.parents.banned[parent] === 1;
    const verdict = this.parents.confirm(parent, prober);
    if (verdict === 'banned' && !wasBanned && this.isPresent(parent)) this.withdrawParent(parent);
    this.replanAfterVerdict(parent);
  }

  /**
   * A verdict may have changed `host`'s download limit (downloadsLimit): a parked host with no free
   * slot under it is parked no more, and a host cleared of blame is planned again.
   */
  private replanAfterVerdict(host: number): void {
    if (!this.isPresent(host)) return;
    if (this.transfers.downloads[host]! >= this.downloadsLimit(host)) this.parked.delete(host);
    else if (this.isDownloading(host)) this.ready.add(host);
  }

  /** A verified upload from `parent`; the first one vouches for it, settling its deferred re-checks. */
  private recordVerified(parent: number, bytesPerSecond: number | undefined, receiver: number): void {
    const wasVouched = this.parents.vouched(parent);
    const wasBlamed = this.parents.blamedForUploads(parent);
    this.parents.recordVerified(parent, bytesPerSecond, receiver);
    // Witnesses that outnumber the accusers clear a parent.
    if (wasBlamed && !this.parents.blamedForUploads(parent)) this.replanAfterVerdict(parent);
    if (wasVouched || this.rechecks.deferredCount === 0 || !this.parents.vouched(parent)) return;
    for (const accused of this.rechecks.takeDeferred(parent)) this.confirm(accused, parent);
  }

  /**
   * Starts probes for queued re-checks: each needs its parent present, unbanned and with a free
   * upload slot, an accuser not yet distrusted, and a prober (findProber). One that cannot start
   * now waits for a later poll; one that no longer matters is dropped. At most PROBER_LOOKS_MAX
   * hosts are looked at per poll, whatever the queue holds.
   */
  private runRechecks(): void {
    let looks = PROBER_LOOKS_MAX;
    for (let i = 0; i < this.rechecks.pending && looks > 0;) {
      const { parent, piece, accuser } = this.rechecks.at(i);
      if (
        !this.isPresent(parent) ||
        this.parents.banned[parent] === 1 ||
        this.parents.distrusted[accuser] === 1
      ) {
        this.rechecks.removeAt(i);
        continue;
      }
      let prober = NONE;
      if (this.transfers.uploads[parent]! < this.uploadsMax && this.hostsDownloading > 0) {
        const budget = Math.min(looks, PROBER_LOOKS_PER_RECHECK, this.present.length + PROBER_PARKED_TRIES);
        prober = this.findProber(parent, piece, accuser, budget);
        looks -= budget;
      }
      if (prober === NONE) {
        i++;
        continue;
      }
      this.start(prober, piece, parent, false);
      this.rechecks.startAt(i, this.assignments[this.assignments.length - 1]!.transferId);
      this.stats.rechecksStarted++;
      this.parkIfFull(prober);
    }
  }

  /**
   * A host to re-check `piece` from `parent`: neither the parent nor the accuser, not distrusted,
   * downloading with a free slot, lacking the piece (so the probe is a fetch it needs) and free to
   * fetch from that parent; one that other hosts vouch for (parent-score.ts) if any is found. A few
   * idle (parked) hosts are tried first, then host ids in order from a random one; `looks` at most.
   */
  private findProber(parent: number, piece: number, accuser: number, looks: number): number {
    const ids = this.present.length;
    const start = this.random.below(ids);
    let unvouched = NONE;
    for (let look = 0; look < looks; look++) {
      const host =
        look < PROBER_PARKED_TRIES
          ? this.parked.size > 0
            ? this.parked.random(this.random)
            : NONE
          : (start + look - PROBER_PARKED_TRIES) % ids;
      if (host === NONE || !this.canProbe(host, parent, piece, accuser)) continue;
      if (this.parents.vouched(host)) return host;
      if (unvouched === NONE) unvouched = host;
    }
    return unvouched;
  }

  private canProbe(host: number, parent: number, piece: number, accuser: number): boolean {
    return (
      host !== parent &&
      host !== accuser &&
      this.isDownloading(host) &&
      this.parents.distrusted[host] !== 1 &&
      this.transfers.downloads[host]! < this.downloadsLimit(host) &&
      !hasBit(this.held[host]!, piece) &&
      !this.inFlight.has(host, piece) &&
      !this.search.isBannedFor(host, parent)
    );
  }

  /**
   * A parent banned for everyone stops counting as a copy of anything (pieces only it held go back
   * to the origin) and its uploads in flight are cancelled.
   */
  private withdrawParent(parent: number): void {
    this.countCopies(parent, -1);
    this.search.setFree(parent, false);
    for (
      let slot = this.transfers.firstUpload(parent);
      slot !== NONE;
      slot = this.transfers.nextUpload(slot)
    ) {
      this.cancel(slot);
    }
  }

  /** Free uploaders are the present, unbanned hosts holding something with a free upload slot. */
  private refreshUploader(host: number): void {
    const free =
      this.present[host] === 1 &&
      this.heldCounts[host]! > 0 &&
      this.parents.banned[host] !== 1 &&
      this.transfers.uploads[host]! < this.uploadsMax;
    this.search.setFree(host, free);
  }

  // ---- transfers ----------------------------------------------------------------------------------

  /** Parked fed members of rings with new entries are planned again: there is work for them now. */
  private wakeRingMembers(): void {
    for (const ring of this.ringEntries.takeGrown()) {
      const members = this.ringEntries.members(ring);
      if (members === undefined) continue;
      for (let i = 0; i < members.size; i++) {
        const host = members.at(i);
        if (this.ringFed[host] === 1 && this.parked.has(host)) this.ready.add(host);
      }
    }
  }

  /**
   * A fed host fetches one of its ring's entries (ring-entries.ts): a piece no member holds or
   * fetches, from a free parent outside the ring, tried at random among a few. One entry at a time
   * (besides origin reads): an entry shares the host's download with its ring parent's pushes, and
   * every push behind a slowed link waits (simulator, 100 hosts in rings of 16: 9.3 s with one,
   * 10.0 s with four).
   */
  private assignRingEntry(host: number): boolean {
    if (this.transfers.downloads[host]! - this.origin.transfersTo(host) >= 1) return false;
    const lacking = this.ringEntries.lacking(this.ringEntries.ringOf(host));
    if (lacking === undefined || lacking.size === 0 || this.search.freeUploaders === 0) return false;
    for (let tries = Math.min(lacking.size, RING_ENTRY_TRIES); tries > 0; tries--) {
      const piece = lacking.random(this.random);
      const parent = this.search.findParentAnywhere(host, piece);
      if (parent === NONE || !this.mayCrossTo(host, parent, piece)) continue;
      this.start(host, piece, parent, false);
      return true;
    }
    return false;
  }

  /** SwarmConfig.ringParents: a piece from the first ring parent without a live transfer to `host`. */
  private assignRing(host: number): boolean {
    // A host blamed for corrupt uploads holds no ring parent's slot: the hosts that share that parent
    // with it need it (8 hosts, 2 sending corrupt bytes: the honest host whose ring held both fetched
    // from 2 parents and finished 5 s after the rest). It fetches what parents have free.
    if (this.parents.blamedForUploads(host)) return false;
    const hosts = this.present.length;
    // A host with a rack label rings with its rack-mates only, one with just a zone label with its
    // zone-mates: pairings stay off the rack uplinks and the links between zones.
    const rack = this.search.rackOf(host);
    const zone = rack === NONE ? this.search.zoneOf(host) : NONE;
    const steps = Math.min(hosts, RING_IDS_EXAMINED_MAX);
    let found = 0;
    for (let step = 1; step < steps && found < this.ringParents; step++) {
      const parent = (host + step) % hosts;
      if (this.present[parent] !== 1) continue;
      if (rack !== NONE && this.search.rackOf(parent) !== rack) continue;
      if (zone !== NONE && this.search.zoneOf(parent) !== zone) continue;
      found++;
      if (this.transfers.uploads[parent]! >= this.uploadsMax || this.downloadsFrom(host, parent)) continue;
      // Slow, failing or corrupt parents leave the ring; the scored choice takes over their slot.
      if (this.parents.isDemoted(parent) || this.parents.banned[parent] === 1) continue;
      if (this.search.isBannedFor(host, parent)) continue;
      const piece = this.ringPiece(parent, host);
      if (piece === NONE) continue;
      this.start(host, piece, parent, false);
      return true;
    }
    return false;
  }

  private start(host: number, piece: number, from: number, hedge: boolean): void {
    const slot = this.transfers.start(host, piece, from, hedge);
    this.inFlight.add(host, piece);
    this.ringEntries.change(host, piece, +1, true);
    if (this.crossesRacks(host, from)) this.crossings.start(this.search.rackOf(host), piece);
    if (from === ORIGIN) {
      this.origin.start(host, piece);
      this.stats.originBytesAssigned += piece === this.pieceCount - 1 ? this.lastPieceBytes : this.pieceBytes;
    } else {
      this.refreshUploader(from);
    }
    this.stats.transfersAssigned++;
    if (hedge) this.stats.hedgesAssigned++;
    this.assignments.push({ transferId: this.transfers.idOf(slot), host, piece, from, hedge });
  }

  /** Releases a transfer's slots on both ends; the piece is in flight no more unless another copy is. */
  private finishTransfer(slot: number): void {
    const host = this.transfers.host[slot]!;
    const piece = this.transfers.piece[slot]!;
    const from = this.transfers.from[slot]!;
    const ended = this.transfers.isEnding(slot);
    this.transfers.finish(slot);
    if (this.crossesRacks(host, from)) this.crossings.finish(this.search.rackOf(host), piece);
    if (from === ORIGIN) {
      this.origin.finish(host, piece, ended);
    } else if (this.isPresent(from)) {
      this.refreshUploader(from);
      this.offers.add(from);
    }
    this.inFlight.remove(host, piece);
    this.ringEntries.change(host, piece, -1, this.rarity.count[piece]! > 0);
  }

  private cancel(slot: number): void {
    if (this.transfers.isCancelled(slot)) return;
    this.transfers.markCancelled(slot);
    this.cancellations.push(this.transfers.idOf(slot));
  }

  private gainPiece(host: number, piece: number): void {
    const held = this.held[host]!;
    if (hasBit(held, piece)) return;
    setBit(held, piece);
    const count = ++this.heldCounts[host]!;
    this.ringEntries.change(host, piece, +1, true);
    if (this.parents.banned[host] !== 1) {
      this.rarity.increment(piece);
      this.holders.set(piece, host);
      if (this.rarity.count[piece] === 1) this.ringEntries.availability(piece, true);
    }
    this.recent.push(host, piece);
    // The other copies of this piece in flight to this host (hedges) lost the race.
    if (this.inFlight.has(host, piece)) this.cancelCopies(host, piece);
    if (count === 1) this.refreshUploader(host);
    this.offers.add(host);
    if (count === this.pieceCount) this.onComplete(host);
  }

  private cancelCopies(host: number, piece: number): void {
    for (
      let slot = this.transfers.firstDownload(host);
      slot !== NONE;
      slot = this.transfers.nextDownload(slot)
    ) {
      if (this.transfers.piece[slot] === piece) this.cancel(slot);
    }
  }

  private onComplete(host: number): void {
    this.stats.hostsComplete++;
    this.hostsDownloading--;
    this.parked.delete(host);
    this.ready.delete(host);
    this.missing.drop(host);
    this.priority.clear(host);
  }

  // ---- host state ---------------------------------------------------------------------------------

  /** The pieces `host` holds, then the pieces of its transfers in flight (a piece twice if both). */
  private *piecesOf(host: number): Generator<number> {
    const held = this.held[host]!;
    for (let w = 0; w < held.length; w++) {
      for (let word = held[w]!; word !== 0; word &= word - 1) yield (w << 5) + lowestBit(word);
    }
    for (
      let slot = this.transfers.firstDownload(host);
      slot !== NONE;
      slot = this.transfers.nextDownload(slot)
    )
      yield this.transfers.piece[slot]!;
  }

  /** The shared selection input, pointed at `host` (one object, so selection allocates nothing). */
  private targetOf(host: number): HostPieces {
    this.target.host = host;
    this.target.held = this.held[host]!;
    return this.target;
  }

  private isPresent(host: number): boolean {
    return host >= 0 && host < this.present.length && this.present[host] === 1;
  }

  private isDownloading(host: number): boolean {
    return this.isPresent(host) && this.heldCounts[host]! < this.pieceCount;
  }

  private lacking(host: number): number {
    return this.pieceCount - this.heldCounts[host]!;
  }

  /**
   * An upper bound on the pieces some host holds that `host` lacks and has not in flight: zero means
   * planning from peers cannot succeed, which is the common case for a host waiting on the origin.
   * Every held piece of an unbanned host is itself a copy, so held pieces are all counted above.
   */
  private lackingAvailable(host: number): number {
    if (this.parents.banned[host] === 1) return 1;
    return (
      this.rarity.heldSomewhere -
      this.heldCounts[host]! -
      this.inFlight.distinctCount(host) +
      this.origin.transfersTo(host)
    );
  }

  /** Adds (+1) or removes (-1) `host` as a copy of everything it holds. */
  private countCopies(host: number, delta: 1 | -1): void {
    const held = this.held[host]!;
    for (let w = 0; w < held.length; w++) {
      let word = held[w]!;
      while (word !== 0) {
        const piece = (w << 5) + lowestBit(word);
        word &= word - 1;
        if (delta > 0) {
          this.rarity.increment(piece);
          this.holders.set(piece, host);
          if (this.rarity.count[piece] === 1) this.ringEntries.availability(piece, true);
        } else {
          this.rarity.decrement(piece);
          this.holders.clear(piece, host);
          if (this.rarity.count[piece] === 0) this.ringEntries.availability(piece, false);
        }
      }
    }
  }

  private fillAll(bitfield: Uint32Array): number {
    bitfield.fill(0xffffffff);
    const tail = this.pieceCount & 31;
    if (tail !== 0) bitfield[bitfield.length - 1] = (1 << tail) - 1;
    return this.pieceCount;
  }

  private tick(nowMs: number): void {
    // Time only moves forward; a shell that passes an older time keeps the newer one.
    if (nowMs > this.nowMs) this.nowMs = nowMs;
  }

  private ensureHosts(hostCount: number): void {
    this.holders.ensureHosts(hostCount);
    this.search.ensureHosts(hostCount);
    this.transfers.ensureHosts(hostCount);
    this.inFlight.ensureHosts(hostCount);
    this.recent.ensureHosts(hostCount);
    this.parents.ensureHosts(hostCount);
    this.origin.ensureHosts(hostCount);
    this.ringEntries.ensureHosts(hostCount);
    if (hostCount <= this.present.length) return;
    const size = Math.max(hostCount, this.present.length * 2);
    this.heldCounts = grown(this.heldCounts, size);
    this.ignoredReports = grown(this.ignoredReports, size);
    const present = new Uint8Array(size);
    present.set(this.present);
    this.present = present;
    const seed = new Uint8Array(size);
    seed.set(this.seed);
    this.seed = seed;
    const ringFed = new Uint8Array(size);
    ringFed.set(this.ringFed);
    this.ringFed = ringFed;
  }
}

function validateConfig(config: SwarmConfig): void {
  const positive: Array<[string, number]> = [
    ['pieceCount', config.pieceCount],
    ['pieceBytes', config.pieceBytes],
    ['originReadersMax', config.originReadersMax],
    ['downloadsPerHostMax', config.downloadsPerHostMax],
    ['uploadsPerHostMax', config.uploadsPerHostMax],
  ];
  for (const [name, value] of positive)
    assert(Number.isInteger(value) && value > 0, `${name} must be a positive integer`);
  assert(config.pieceCount < 2 ** 28, 'pieceCount must be below 2^28');
  const last = config.totalBytes - (config.pieceCount - 1) * config.pieceBytes;
  assert(last > 0 && last <= config.pieceBytes, 'totalBytes must fit pieceCount pieces of pieceBytes');
  assert(
    Number.isInteger(config.hedgeTailPieces) && config.hedgeTailPieces >= 0,
    'hedgeTailPieces must be >= 0',
  );
  const perHost = config.originReadersPerHostMax;
  assert(
    perHost === undefined || (Number.isInteger(perHost) && perHost > 0),
    'originReadersPerHostMax must be > 0',
  );
  const ring = config.ringParents;
  assert(ring === undefined || (Number.isInteger(ring) && ring >= 0), 'ringParents must be >= 0');
}

function labelId(ids: Map<string, number>, label: string | undefined): number {
  if (label === undefined) return NONE;
  let id = ids.get(label);
  if (id === undefined) {
    id = ids.size;
    ids.set(label, id);
  }
  return id;
}

/** Sets the bits of the valid, distinct piece numbers in `held`; returns how many were set. */
function fillFrom(bitfield: Uint32Array, held: Iterable<number> | undefined, pieceCount: number): number {
  if (held === undefined) return 0;
  let count = 0;
  for (const piece of held) {
    if (!Number.isInteger(piece) || piece < 0 || piece >= pieceCount || hasBit(bitfield, piece)) continue;
    setBit(bitfield, piece);
    count++;
  }
  return count;
}

function grown(array: Int32Array, size: number): Int32Array<ArrayBuffer> {
  const out = new Int32Array(size);
  out.set(array);
  return out;
}
