/**
 * What the core knows about each host as a parent, and how it ranks parents for a download.
 *
 * Reports flow in: a verified transfer adds its measured rate to the parent's moving average and to
 * a ring of recent rates across the swarm (whose median is the yardstick for "slow"), and its
 * receiver counts as a witness for the parent; a failed transfer adds to the parent's failure score;
 * a corrupt one makes its reporter an accuser. Blame needs evidence: a parent is demoted for
 * everyone only when at least two distinct hosts accuse it and they are at least as many as its
 * witnesses; a parent whose witnesses outnumber its accusers by two or more is cleared, and its
 * accusers are distrusted (their reports no longer count, and they rank as demoted parents
 * themselves). Every accusation is also re-checked (recheck.ts): a third host the core picks
 * fetches the same piece from the same parent; its verified copy refutes the accusation (`refute`),
 * a corrupt one confirms it (`confirm`). A parent is banned for everyone only when a re-check
 * confirmed corrupt bytes and its accusers outnumber its witnesses. So no single host, and no
 * number of made-up hosts whose accusations a re-check refutes, can exile an honest parent. Scores flow out: one number per
 * candidate, ordered by (not demoted, locality tier, idle upload bandwidth), so a comparison is one
 * `>`.
 */

/** A parent is slow when its average is below this fraction of the swarm's median transfer rate. */
export const SLOW_FRACTION = 0.25;
/** Verified uploads a parent needs before it can be judged slow. */
export const SLOW_SAMPLES_MIN = 3;
/** Recent verified transfer rates kept for the median, and how many are needed before using it. */
export const RATE_RING_SIZE = 64;
export const RATE_RING_MIN = 16;
/** Failure score at which a parent is demoted; each verified upload halves the score. */
export const FAILURE_SCORE_DEMOTED = 2;

export const TIER_OTHER = 0;
export const TIER_ZONE = 1;
export const TIER_RACK = 2;

/** Idle bandwidth is clamped below this so it never spills into the tier digits of a score. */
const IDLE_SCALE = 2 ** 40;
const EWMA_WEIGHT = 0.25;
const NO_HOST = -1;

/** What a corrupt report did: nothing for everyone yet, a demotion, a ban, or nothing (a distrusted reporter). */
export type CorruptVerdict = 'accused' | 'demoted' | 'banned' | 'ignored';

/** Distinct witnesses and accusers remembered per parent: enough to weigh a few accusers against many. */
export const EVIDENCE_MAX = 8;
/** Accusers needed before a report counts against a parent for everyone. */
const ACCUSERS_MIN = 2;
/** Witnesses beyond the accusers that clear a parent (and discredit its accusers). */
const CLEARING_MARGIN = 2;

/**
 * Locality of a parent relative to a host. Label ids are >= 0 when known and -1 when absent; a rack
 * id names a (zone, rack) pair, so equal rack ids mean the same rack of the same zone.
 */
export function localityTier(
  hostZone: number,
  hostRack: number,
  parentZone: number,
  parentRack: number,
): number {
  if (hostRack >= 0 && hostRack === parentRack) return TIER_RACK;
  if (hostZone >= 0 && hostZone === parentZone) return TIER_ZONE;
  return TIER_OTHER;
}

/**
 * One comparable number per candidate: a parent that is not demoted beats any demoted one; then the
 * nearer tier wins; then the one with more idle upload bandwidth.
 */
export function parentScore(demoted: boolean, tier: number, idleBytesPerSecond: number): number {
  const idle = Math.min(Math.max(idleBytesPerSecond, 0), IDLE_SCALE - 1);
  return ((demoted ? 0 : 3) + tier) * IDLE_SCALE + idle;
}

/** The median of the first `length` values of `values` (sorts a copy in `scratch`, if given). */
export function median(values: Float64Array, length: number, scratch?: Float64Array): number {
  const sorted = (scratch ?? new Float64Array(length)).subarray(0, length);
  sorted.set(values.subarray(0, length));
  sorted.sort();
  const middle = length >>> 1;
  return length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

export class ParentRecords {
  uploadBytesPerSecond = new Float64Array(0);
  /** Moving average of the per-transfer rate of this host's verified uploads; 0 until measured. */
  rateAverage = new Float64Array(0);
  rateSamples = new Int32Array(0);
  failureScore = new Float64Array(0);
  slow = new Uint8Array(0);
  corrupt = new Uint8Array(0);
  banned = new Uint8Array(0);
  /** Hosts whose corrupt reports did not hold up (against a parent's witnesses, or a re-check). */
  distrusted = new Uint8Array(0);
  /** Parents a re-check caught sending corrupt bytes to a host the core picked. */
  confirmed = new Uint8Array(0);
  /** Per parent, the first EVIDENCE_MAX distinct hosts that verified bytes from it, and their count. */
  private witnesses = new Int32Array(0);
  private witnessCount = new Uint8Array(0);
  /** Per parent, the distinct (trusted) hosts that reported corrupt bytes from it, and their count. */
  private accusers = new Int32Array(0);
  private accuserCount = new Uint8Array(0);
  private readonly ring = new Float64Array(RATE_RING_SIZE);
  private readonly sorted = new Float64Array(RATE_RING_SIZE);
  private ringLength = 0;
  private ringNext = 0;
  private medianRate = 0;
  private samplesSinceMedian = 0;

  /** Makes room for host ids below `hostCount`. */
  ensureHosts(hostCount: number): void {
    if (hostCount <= this.rateAverage.length) return;
    const size = Math.max(hostCount, this.rateAverage.length * 2);
    this.uploadBytesPerSecond = grownFloat(this.uploadBytesPerSecond, size);
    this.rateAverage = grownFloat(this.rateAverage, size);
    this.failureScore = grownFloat(this.failureScore, size);
    const samples = new Int32Array(size);
    samples.set(this.rateSamples);
    this.rateSamples = samples;
    this.slow = grownBytes(this.slow, size);
    this.corrupt = grownBytes(this.corrupt, size);
    this.banned = grownBytes(this.banned, size);
    this.distrusted = grownBytes(this.distrusted, size);
    this.confirmed = grownBytes(this.confirmed, size);
    this.witnessCount = grownBytes(this.witnessCount, size);
    this.accuserCount = grownBytes(this.accuserCount, size);
    this.witnesses = grownHostLists(this.witnesses, size);
    this.accusers = grownHostLists(this.accusers, size);
  }

  /** A host (re)joins: its measured history starts over, but a ban or a corrupt mark stays. */
  reset(host: number, uploadBytesPerSecond: number): void {
    this.uploadBytesPerSecond[host] = uploadBytesPerSecond;
    this.rateAverage[host] = 0;
    this.rateSamples[host] = 0;
    this.failureScore[host] = 0;
    this.slow[host] = 0;
  }

  /** Banned, or marked by blame (corrupt or distrusted): a mark that must stay with this host. */
  isBlamed(host: number): boolean {
    return this.banned[host] === 1 || this.corrupt[host] === 1 || this.distrusted[host] === 1;
  }

  /**
   * Blamed for corrupt uploads: banned, or accused by enough hosts (`corrupt`). Such a host takes no
   * first copies, no ring parent's slot and fewer downloads (swarm-core.ts) while others are in good
   * standing; it stays a parent of last resort for hosts that have not banned it, so witnesses can
   * still clear it. Reversible while not banned.
   */
  blamedForUploads(host: number): boolean {
    return this.banned[host] === 1 || this.corrupt[host] === 1;
  }

  isDemoted(host: number): boolean {
    return (
      this.slow[host] === 1 ||
      this.corrupt[host] === 1 ||
      this.distrusted[host] === 1 ||
      this.failureScore[host]! >= FAILURE_SCORE_DEMOTED
    );
  }

  /** Upload bandwidth not used by the parent's current uploads, each assumed to run at its measured rate. */
  idleBytesPerSecond(host: number, uploadsInFlight: number, uploadsPerHostMax: number): number {
    const capacity = this.uploadBytesPerSecond[host]!;
    const measured = this.rateAverage[host]!;
    const perUpload = measured > 0 ? Math.min(measured, capacity) : capacity / uploadsPerHostMax;
    return capacity - uploadsInFlight * perUpload;
  }

  /** Some other host verified bytes `host` sent it: `host` takes part in the swarm for real. */
  vouched(host: number): boolean {
    return this.witnessCount[host]! > 0;
  }

  /** `receiver` verified bytes from `host`: a rate sample, and a witness for `host`. */
  recordVerified(host: number, bytesPerSecond: number | undefined, receiver = NO_HOST): void {
    this.failureScore[host]! *= 0.5;
    // Once a parent has EVIDENCE_MAX witnesses this is one comparison: the hot path stays cheap.
    if (receiver !== NO_HOST && this.witnessCount[host]! < EVIDENCE_MAX) {
      if (addDistinct(this.witnesses, this.witnessCount, host, receiver) && this.accuserCount[host]! > 0) {
        this.judge(host);
      }
    }
    if (bytesPerSecond === undefined || !(bytesPerSecond > 0) || !Number.isFinite(bytesPerSecond)) return;
    const samples = this.rateSamples[host]!;
    const average = this.rateAverage[host]!;
    this.rateAverage[host] =
      samples === 0 ? bytesPerSecond : average + EWMA_WEIGHT * (bytesPerSecond - average);
    this.rateSamples[host] = samples + 1;
    this.addToRing(bytesPerSecond);
    this.slow[host] = this.judgedSlow(host) ? 1 : 0;
  }

  recordFailed(host: number): void {
    this.failureScore[host]! += 1;
  }

  /**
   * Records that `reporter` received bytes from `host` that failed verification (the core also has
   * the reporter ban `host` for itself). What it means for everyone is weighed in `judge`.
   */
  recordCorrupt(host: number, reporter: number): CorruptVerdict {
    if (this.distrusted[reporter] === 1) return 'ignored';
    if (this.accuserCount[host]! < EVIDENCE_MAX)
      addDistinct(this.accusers, this.accuserCount, host, reporter);
    return this.judge(host);
  }

  /**
   * A third host the core chose fetched the piece `accuser` called corrupt from `host`, and it
   * verified: the accusation is withdrawn and the accuser distrusted (see recheck.ts).
   */
  refute(host: number, accuser: number): CorruptVerdict {
    this.distrusted[accuser] = 1;
    removeMember(this.accusers, this.accuserCount, host, accuser);
    return this.judge(host);
  }

  /** A re-check by `prober`, a host the core picked, got corrupt bytes from `host` too. */
  confirm(host: number, prober: number): CorruptVerdict {
    this.confirmed[host] = 1;
    if (this.accuserCount[host]! < EVIDENCE_MAX) addDistinct(this.accusers, this.accuserCount, host, prober);
    return this.judge(host);
  }

  /** Accusers against witnesses: see the module comment. A ban is never lifted. */
  private judge(host: number): CorruptVerdict {
    const accusers = this.accuserCount[host]!;
    const witnesses = this.witnessCount[host]!;
    if (witnesses >= accusers + CLEARING_MARGIN) {
      for (let i = 0; i < accusers; i++) this.distrusted[this.accusers[host * EVIDENCE_MAX + i]!] = 1;
      this.accuserCount[host] = 0;
      this.corrupt[host] = 0;
      return this.banned[host] === 1 ? 'banned' : 'accused';
    }
    if (this.confirmed[host] === 1 && accusers >= ACCUSERS_MIN && accusers > witnesses) this.banned[host] = 1;
    this.corrupt[host] = accusers >= ACCUSERS_MIN && accusers >= witnesses ? 1 : 0;
    return this.banned[host] === 1 ? 'banned' : this.corrupt[host] === 1 ? 'demoted' : 'accused';
  }

  /** The swarm's median verified transfer rate, or 0 before enough samples. */
  get medianBytesPerSecond(): number {
    return this.ringLength >= RATE_RING_MIN ? this.medianRate : 0;
  }

  private judgedSlow(host: number): boolean {
    const yardstick = this.medianBytesPerSecond;
    return (
      yardstick > 0 &&
      this.rateSamples[host]! >= SLOW_SAMPLES_MIN &&
      this.rateAverage[host]! < SLOW_FRACTION * yardstick
    );
  }

  private addToRing(bytesPerSecond: number): void {
    this.ring[this.ringNext] = bytesPerSecond;
    this.ringNext = (this.ringNext + 1) % RATE_RING_SIZE;
    if (this.ringLength < RATE_RING_SIZE) this.ringLength++;
    // Re-sorting the ring on every report would dominate the hot path; once per ring turn is plenty.
    if (++this.samplesSinceMedian >= RATE_RING_SIZE || this.ringLength <= RATE_RING_MIN) {
      this.samplesSinceMedian = 0;
      this.medianRate = median(this.ring, this.ringLength, this.sorted);
    }
  }
}

function grownFloat(array: Float64Array, size: number): Float64Array<ArrayBuffer> {
  const grown = new Float64Array(size);
  grown.set(array);
  return grown;
}

function grownBytes(array: Uint8Array, size: number): Uint8Array<ArrayBuffer> {
  const grown = new Uint8Array(size);
  grown.set(array);
  return grown;
}

/** Adds `member` to `owner`'s list (EVIDENCE_MAX slots per owner) unless it is there; true if added. */
function addDistinct(lists: Int32Array, counts: Uint8Array, owner: number, member: number): boolean {
  const base = owner * EVIDENCE_MAX;
  const count = counts[owner]!;
  for (let i = 0; i < count; i++) if (lists[base + i] === member) return false;
  lists[base + count] = member;
  counts[owner] = count + 1;
  return true;
}

/** Removes `member` from `owner`'s list if it is there (order is not kept). */
function removeMember(lists: Int32Array, counts: Uint8Array, owner: number, member: number): void {
  const base = owner * EVIDENCE_MAX;
  const count = counts[owner]!;
  for (let i = 0; i < count; i++) {
    if (lists[base + i] !== member) continue;
    lists[base + i] = lists[base + count - 1]!;
    lists[base + count - 1] = NO_HOST;
    counts[owner] = count - 1;
    return;
  }
}

function grownHostLists(old: Int32Array, hosts: number): Int32Array<ArrayBuffer> {
  const grown = new Int32Array(hosts * EVIDENCE_MAX).fill(NO_HOST);
  grown.set(old);
  return grown;
}
