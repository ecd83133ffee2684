/**
 * Re-checks of suspected pieces. A corrupt report names a parent, a piece and the reporter (the
 * accuser), and by itself proves nothing: the reporter may lie. So the core has a third host, one it
 * picks itself and that lacks the piece anyway, fetch that same piece from that same parent. If the
 * third host's copy verifies, the accusation did not hold up: it is withdrawn and the accuser is
 * distrusted (its reports stop counting, and it ranks as a demoted parent). If the copy is corrupt
 * too, the prober is one more accuser, and if other hosts vouch for the prober (it has sent verified
 * bytes to some), the accusation is confirmed: the parent is banned for everyone once its accusers
 * outnumber its witnesses (so a parent that served many others is not exiled by colluding hosts).
 * A corrupt copy from a prober no one vouches for yet (early in a run, or a made-up host holding
 * nothing, perhaps the accuser's accomplice) confirms only once some host verifies bytes from that
 * prober, and meanwhile the re-check goes to another host. Without a confirmed re-check nobody is
 * banned for everyone. The probe is an ordinary transfer of a piece the prober needs: a re-check
 * costs no extra bytes.
 *
 * This module only keeps the queue and the probes in flight; the core decides who probes and what a
 * probe's outcome means. Bounded: at most RECHECKS_PENDING_MAX suspicions wait at once (more are
 * weighed by accuser counts alone, as before), one per (parent, accuser) pair, and a probe that
 * fails or is cancelled is tried again at most RECHECK_ATTEMPTS_MAX times in all.
 */

export const RECHECKS_PENDING_MAX = 64;
export const RECHECK_ATTEMPTS_MAX = 3;

export interface Recheck {
  parent: number;
  piece: number;
  accuser: number;
  /** Probes started for it so far. */
  attempts: number;
}

export class Rechecks {
  private readonly queue: Recheck[] = [];
  /** Probes in flight, by transfer id. */
  private readonly running = new Map<number, Recheck>();

  get pending(): number {
    return this.queue.length;
  }

  get probing(): number {
    return this.running.size;
  }

  /** Queues a suspicion; false when the queue is full or this pair is already being checked. */
  add(parent: number, piece: number, accuser: number): boolean {
    if (this.queue.length + this.running.size >= RECHECKS_PENDING_MAX) return false;
    if (this.queue.some((r) => r.parent === parent && r.accuser === accuser)) return false;
    for (const r of this.running.values()) if (r.parent === parent && r.accuser === accuser) return false;
    this.queue.push({ parent, piece, accuser, attempts: 0 });
    return true;
  }

  at(index: number): Recheck {
    return this.queue[index]!;
  }

  /** Removes the queued re-check at `index` (order is not kept). */
  removeAt(index: number): void {
    const last = this.queue.pop()!;
    if (index < this.queue.length) this.queue[index] = last;
  }

  /** The queued re-check at `index` is now probed by transfer `transferId`. */
  startAt(index: number, transferId: number): void {
    const recheck = this.queue[index]!;
    this.removeAt(index);
    recheck.attempts++;
    this.running.set(transferId, recheck);
  }

  /** The re-check transfer `transferId` probes, if any; it is no longer in flight. */
  take(transferId: number): Recheck | undefined {
    const recheck = this.running.get(transferId);
    if (recheck !== undefined) this.running.delete(transferId);
    return recheck;
  }

  /** Corrupt probe results from probers no one vouched for yet, as (parent, prober) pairs. */
  private readonly deferred: Array<{ parent: number; prober: number }> = [];

  get deferredCount(): number {
    return this.deferred.length;
  }

  /** `prober`'s probe of `parent` got corrupt bytes; it counts once other hosts vouch for `prober`. */
  defer(parent: number, prober: number): void {
    if (this.deferred.length < RECHECKS_PENDING_MAX) this.deferred.push({ parent, prober });
  }

  /** The parents `prober`'s deferred results accuse, now that it is vouched for; they are settled. */
  takeDeferred(prober: number): number[] {
    const parents: number[] = [];
    for (let i = this.deferred.length - 1; i >= 0; i--) {
      const entry = this.deferred[i]!;
      if (entry.prober !== prober) continue;
      parents.push(entry.parent);
      this.deferred.splice(i, 1);
    }
    return parents;
  }

  /**
   * A probe failed or was dropped, or proved nothing (`counted` false: the attempt is given back):
   * queue it again unless it has had its attempts.
   */
  retry(recheck: Recheck | undefined, counted = true): void {
    if (recheck === undefined) return;
    if (!counted) recheck.attempts--;
    if (recheck.attempts >= RECHECK_ATTEMPTS_MAX) return;
    if (this.queue.length + this.running.size < RECHECKS_PENDING_MAX) this.queue.push(recheck);
  }
}
