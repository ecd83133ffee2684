/**
 * The fallback policy: which pieces a member fetches, and from whom, while it has no scheduler (the
 * scheduler stopped answering, or cannot be reached). It decides from what the member alone knows:
 * the pieces it holds and is fetching, the pieces a reader is blocked on, and the have-maps its
 * known peers last answered with. Pure and deterministic: the caller passes the random generator,
 * so the simulator replays it from a seed as it replays the scheduler (sim/simulate.ts,
 * `schedulerLossAtMs`), and the agent's member runs the same function (agent/fallback-fetcher.ts).
 *
 * The rules, each checked in the simulator against a run that keeps its scheduler (bench:sim):
 * - blocked pieces first;
 * - then, of a few missing pieces drawn at random, the one the fewest known peers hold, from a
 *   random one of them: rare pieces spread first, and hosts on their own do not all ask for the
 *   same piece;
 * - a piece no known peer holds comes from the origin, but only when it falls in this host's
 *   stripe of the pieces (piece mod stripe count), so the hosts split the origin's work instead of
 *   each reading the same pieces; a host with nothing else to do reads any such piece, so a stripe
 *   whose host died still arrives; at most `originReadsMax` origin reads at once per host;
 * - a peer that turned a fetch away as busy is no source until its map is read again, but what its
 *   map lists is not read from the origin meanwhile (up to FALLBACK_BUSY_STREAK_MAX busy answers in
 *   a row): idle hosts read those pieces from the origin a second time (1.15-1.29 x S; now
 *   1.04-1.08, 8 and 64 hosts, for 1-3 % more time);
 * - with racks (the scheduler lists a host's rack-mates first and says how many), a rack-mate holding
 *   a piece is its source; a piece only other racks hold is brought in by one host of the rack (its
 *   rack stripe) and the others take it from there, so each piece crosses a rack's uplink about
 *   once (100 hosts in 2, 5, 10 racks, the scheduler lost at 3 s: 47.6, 36.8, 23.5 s -> 11.7, 12.4,
 *   12.9 s); an idle host takes one such piece from another rack all the same, so a rack-mate that
 *   is gone stalls nothing;
 * - in ring mode (ring-plan.ts) the pushes go on without a scheduler. In a chain, a member fed by
 *   a ring parent whose feed still delivers fetches only blocked pieces (its fetches would race the
 *   pushes for its link and read the origin a second time), and the head reads every piece nobody
 *   holds from the origin, its stripe or not: the chain behind it lives on its reads
 *   (`FallbackView.ring`, `ringFeedDelivers`); no other member reads the origin but for blocked
 *   pieces. A member whose feed ended finds its place again first (`orphanMove`). A ring has no
 *   head: nobody would read a piece no member holds, its feeds would go quiet together and open
 *   again with every read (simulated: 8 hosts, the scheduler lost at 3 s, 0.14 of the bound), so
 *   its members fetch as any host does.
 */

import type { Random } from './random.js';

export interface FallbackPeer<P> {
  peer: P;
  /** The pieces its last have-map listed; undefined when it did not answer. */
  pieces: { has(piece: number): boolean } | undefined;
  /**
   * It turned a fetch away as busy since its map was read: not a source until its map is read
   * again, but still a holder of what the map lists (no origin read for those pieces meanwhile).
   */
  busy?: boolean;
  /** It is in this host's rack (racks known: `FallbackView.rackStripe`). */
  sameRack?: boolean;
  /**
   * Ring mode, as its last have-map said: `pushing`, it pushes to a ring child (its upload carries
   * the rest of its chain, so it is a source only for pieces no holder that pushes nothing has);
   * `flowing`, pieces keep coming to it (its feed delivers, or it heads a chain); `held`, the pieces
   * it held; `parent`, whose feed it takes; `head`, it reads the origin for its chain.
   */
  ring?: { pushing: boolean; flowing: boolean; held: number; parent?: P | undefined; head?: boolean };
}

export interface FallbackView<P> {
  pieceCount: number;
  /** The member holds the piece verified. */
  holds(piece: number): boolean;
  /** A fetch of the piece is under way (on its own, or one the scheduler assigned before it went). */
  fetching(piece: number): boolean;
  /** Pieces a reader is blocked on. */
  urgent: ReadonlySet<number>;
  peers: ReadonlyArray<FallbackPeer<P>>;
  /** Fallback fetches under way, and how many of them read the origin. */
  running: number;
  originReads: number;
  /**
   * This host's share of the origin's work: pieces with `piece % count === index` (its place among
   * the hosts it knows, itself included, in an order they all agree on). Absent: every piece.
   */
  stripe?: { index: number; count: number };
  /**
   * With racks: this host's share of the pieces that enter its rack from other racks (`piece %
   * count === index`, its place among its rack-mates, itself included). Absent: no racks.
   */
  rackStripe?: { index: number; count: number };
  /**
   * Ring mode: `fed`, a ring parent's feed delivers to this host (`ringFeedDelivers`); `chain`, its
   * ring is a chain: fed, only blocked pieces are fetched; `head`, this host heads a chain (the
   * scheduler said so): no stripe, every piece nobody holds is its to read from the origin.
   */
  ring?: { fed: boolean; head: boolean; chain: boolean };
}

/**
 * A ring feed that is open counts as delivering while it pushed a piece in the last
 * FALLBACK_FEED_QUIET_MS, or the member has been on its own for less than that (the chain's head
 * needs a moment to start reading the origin itself). A parent that is stuck with the connection
 * open then holds its child back this long, and no longer.
 */
export const FALLBACK_FEED_QUIET_MS = 3000;

/** Whether a ring feed counts as delivering (see FALLBACK_FEED_QUIET_MS); times in ms, any clock. */
export function ringFeedDelivers(
  feedOpen: boolean,
  lastPushMs: number | undefined,
  onOwnSinceMs: number,
  nowMs: number,
): boolean {
  if (!feedOpen) return false;
  return nowMs - Math.max(lastPushMs ?? onOwnSinceMs, onOwnSinceMs) < FALLBACK_FEED_QUIET_MS;
}

/**
 * What a chain member whose feed closed does while the scheduler is gone (its parent died, or cut
 * it off): its part of the chain would otherwise fetch piece by piece from hosts whose uploads carry
 * the chain ahead of it, and slow them (simulated: 8 hosts, one failing after the scheduler went,
 * 13.9-14.7 s per piece, 16.4-18.1 s chained).
 * - Its last parent answered and pushes to nobody: `subscribe` to it again. A piece cut through
 *   and lost closes every feed behind it, parents alive or not; this mends those links as they were.
 * - Else, of the peers that push to nobody and whose feed comes, parent by parent, from a head
 *   (the end of the chain ahead: the host before the gap), `subscribe` to the one that holds the
 *   most. Not to a host that fetches on its own, nor one fed by it: 64 hosts losing 5 after the
 *   scheduler took 20.8 s instead of 12.5 when part of the chain hung behind such a host.
 * - None: if some peer whose pieces keep coming holds more than it does, or the chain's head is
 *   alive, `fetch` as any host on its own does (and look again); else it leads what is left of the
 *   chain, and reads as its `head` (the head died).
 * Never a peer whose feed comes, by the parents the maps name, from `self`: that would close a
 * loop with no head.
 */
export type OrphanMove<P> = { kind: 'subscribe'; peer: P } | { kind: 'fetch' } | { kind: 'head' };

export function orphanMove<P>(
  self: P,
  held: number,
  peers: ReadonlyArray<FallbackPeer<P>>,
  lastParent?: P,
): OrphanMove<P> {
  const parentOf = new Map<P, P | undefined>();
  for (const peer of peers) parentOf.set(peer.peer, peer.ring?.parent);
  const headOf = new Map<P, boolean>();
  for (const peer of peers) headOf.set(peer.peer, peer.ring?.head === true);
  /** Where a peer's feed comes from, parent by parent: this host, a head, or neither. */
  const rootOf = (peer: P): 'self' | 'head' | undefined => {
    let at: P | undefined = peer;
    for (let hops = 0; at !== undefined && hops <= peers.length; hops++) {
      if (at === self) return 'self';
      if (headOf.get(at) === true) return 'head';
      at = parentOf.get(at);
    }
    return undefined;
  };
  const candidate = (peer: FallbackPeer<P>): boolean =>
    peer.ring?.pushing === false && rootOf(peer.peer) !== 'self';
  let ahead = false;
  let best: { peer: P; held: number } | undefined;
  for (const peer of peers) {
    const ring = peer.ring;
    if (ring !== undefined && peer.peer === lastParent && peer.pieces !== undefined && candidate(peer))
      return { kind: 'subscribe', peer: peer.peer };
    if (ring === undefined) continue;
    if (candidate(peer) && rootOf(peer.peer) === 'head' && (best === undefined || ring.held > best.held))
      best = { peer: peer.peer, held: ring.held };
    // The chain's head, alive, is ahead even when it holds no more: passed every piece as it
    // arrived, a member holds as many as the head does. Its map may still say it pushes to the
    // parent that just died (cluster test: a member led, and read the origin, in 1 run of ~5).
    if (ring.flowing && (ring.held > held || ring.head === true)) ahead = true;
  }
  if (best !== undefined) return { kind: 'subscribe', peer: best.peer };
  return ahead ? { kind: 'fetch' } : { kind: 'head' };
}

export interface FallbackLimits {
  /** Fetches at once. */
  downloadsMax: number;
  /** Fetches from the origin at once. */
  originReadsMax: number;
}

export interface FallbackPick<P> {
  piece: number;
  source: { kind: 'origin' } | { kind: 'peer'; peer: P };
}

/**
 * A member on its own asks its known peers for their have-maps again when its copy is this old (a
 * small GET per peer, at most 64 peers, only while the scheduler is gone). Simulated (8 and 64 hosts
 * x 200 Mbit/s, 256 MiB in 512 KiB pieces, the scheduler lost at the start), 1000 ms left the swarm
 * at 0.61 and 0.59 of the bound, 250 ms at 0.80 and 0.68, the origin at 1.15 and 1.30 x S.
 */
export const FALLBACK_HAVE_REFRESH_MS = 250;
/** A member on its own looks for work this often (and whenever one of its fetches ends). */
export const FALLBACK_PUMP_EVERY_MS = 200;
/** Origin reads at once per member on its own. */
export const FALLBACK_ORIGIN_READS_MAX = 2;

/**
 * Busy answers in a row after which a peer's map no longer counts (it is dropped, as for a peer that
 * failed): a peer that claims pieces and only ever answers busy would otherwise hold them back from
 * the origin for good.
 */
export const FALLBACK_BUSY_STREAK_MAX = 3;

/**
 * What a member on its own does with a peer's have-map after a fetch from that peer: keep it (the
 * piece came), keep it marked busy (the peer turned the fetch away, fewer than
 * FALLBACK_BUSY_STREAK_MAX + 1 times in a row), or drop it until it is read again (any other
 * failure, or busy once too often). `streak` is the busy answers in a row before this fetch.
 */
export function afterPeerFetch(
  streak: number,
  outcome: 'verified' | 'busy' | 'failed',
): { streak: number; map: 'keep' | 'busy' | 'drop' } {
  if (outcome === 'verified') return { streak: 0, map: 'keep' };
  if (outcome === 'failed') return { streak: 0, map: 'drop' };
  const next = streak + 1;
  return { streak: next, map: next <= FALLBACK_BUSY_STREAK_MAX ? 'busy' : 'drop' };
}

/**
 * Rounds of draws per call at most: a bound on the work of one pump (FALLBACK_DRAWS pieces a round)
 * when few drawn pieces have a holder that may serve now (a large model whose holders are busy).
 * What is not reached waits for the next pump.
 */
export const FALLBACK_ROUNDS_MAX = 64;

/** Missing pieces drawn for each pick; the rarest among them with a holder is fetched. */
export const FALLBACK_DRAWS = 4;

/** The fetches to start now, in order; none when the member is at its limits or holds everything. */
export function pickFallbackFetches<P>(
  view: FallbackView<P>,
  limits: FallbackLimits,
  random: Random,
): FallbackPick<P>[] {
  const picks: FallbackPick<P>[] = [];
  let running = view.running;
  let originReads = view.originReads;
  if (running >= limits.downloadsMax) return picks;
  const wanted = (piece: number): boolean => !view.holds(piece) && !view.fetching(piece);
  const forget = (piece: number): void => {
    tried.delete(piece);
    rest?.push(piece);
  };
  const holdersOf = (piece: number): FallbackPeer<P>[] => {
    const holders = view.peers.filter((peer) => peer.busy !== true && peer.pieces?.has(piece) === true);
    const idle = holders.filter((peer) => peer.ring?.pushing !== true);
    return idle.length > 0 ? idle : holders;
  };
  const heldByBusy = (piece: number): boolean =>
    view.peers.some((peer) => peer.busy === true && peer.pieces?.has(piece) === true);
  const fromPeer = (piece: number, holders: FallbackPeer<P>[]): void => {
    const holder = holders[random.below(holders.length)] as FallbackPeer<P>;
    picks.push({ piece, source: { kind: 'peer', peer: holder.peer } });
    running++;
  };
  const fromOrigin = (piece: number): void => {
    picks.push({ piece, source: { kind: 'origin' } });
    running++;
    originReads++;
  };
  const urgent = [...view.urgent].filter((piece) => piece >= 0 && piece < view.pieceCount && wanted(piece));
  urgent.sort((a, b) => a - b);
  for (const piece of urgent) {
    if (running >= limits.downloadsMax) return picks;
    const holders = holdersOf(piece);
    if (holders.length > 0) fromPeer(piece, holders);
    else if (originReads < limits.originReadsMax) fromOrigin(piece);
  }
  // In a chain, every other piece comes with the ring parent's pushes.
  if (view.ring?.fed === true && view.ring.chain) return picks;
  // Pieces are drawn at random among the wanted ones: by rejection while most are wanted (no pass
  // over every piece per call), from a list of the rest once few are left.
  const tried = new Set<number>();
  let rest: number[] | undefined;
  const draw = (): number | undefined => {
    for (let attempt = 0; rest === undefined && attempt < REJECTION_DRAWS; attempt++) {
      const piece = random.below(view.pieceCount);
      if (!tried.has(piece) && !view.urgent.has(piece) && wanted(piece)) return piece;
    }
    rest ??= wantedPieces(view, tried);
    while (rest.length > 0) {
      const piece = takeRandom(rest, random);
      if (!tried.has(piece)) return piece;
    }
    return undefined;
  };
  /** Pieces nobody known holds, outside this host's stripe: read only when there is nothing else. */
  const elsewhere: number[] = [];
  // In a chain the origin is its head's to read (orphanMove makes a head where the head died).
  const readsOrigin = view.ring === undefined || !view.ring.chain || view.ring.head;
  const stripe = view.ring?.head === true ? undefined : view.stripe;
  const mine = (piece: number): boolean => stripe === undefined || piece % stripe.count === stripe.index;
  const rackStripe = view.rackStripe;
  const mineToBringIn = (piece: number): boolean =>
    rackStripe === undefined || piece % rackStripe.count === rackStripe.index;
  /** Pieces only other racks hold, outside this host's rack stripe: fetched only when idle. */
  const remote: Array<{ piece: number; holders: FallbackPeer<P>[] }> = [];
  /** Pieces only hosts pushing to a ring child hold: fetched only when idle. */
  const pushedOnly: Array<{ piece: number; holders: FallbackPeer<P>[] }> = [];
  const someIdle = view.peers.some((peer) => peer.ring?.pushing === false && peer.pieces !== undefined);
  for (let round = 0; running < limits.downloadsMax && round < FALLBACK_ROUNDS_MAX; round++) {
    let best: { piece: number; holders: FallbackPeer<P>[] } | undefined;
    const drawn: number[] = [];
    const unheld: number[] = [];
    for (let n = 0; n < FALLBACK_DRAWS; n++) {
      const piece = draw();
      if (piece === undefined) break;
      tried.add(piece);
      drawn.push(piece);
      let holders = holdersOf(piece);
      if (holders.length === 0) {
        // Held by a peer that is busy for now: fetched from it later, not from the origin.
        if (!heldByBusy(piece)) unheld.push(piece);
        continue;
      }
      if (rackStripe !== undefined) {
        // With racks, a rack-mate is the source when one holds the piece; a piece only other
        // racks hold is brought in by one host of the rack (its stripe), and the others take it
        // from that host, so each piece crosses the rack's uplink about once.
        const local = holders.filter((holder) => holder.sameRack === true);
        if (local.length > 0) holders = local;
        else if (!mineToBringIn(piece)) {
          remote.push({ piece, holders });
          continue;
        }
      }
      if (best === undefined || betterSource(holders, best.holders)) best = { piece, holders };
    }
    if (drawn.length === 0) break;
    if (best !== undefined && best.holders[0]?.ring?.pushing === true && someIdle) {
      // Only hosts that push on to a ring child hold it (betterSource put it last): each fetch from
      // one takes a share of its upload from the chain behind it, so one such fetch at a time while
      // some peer pushes to nobody (a chain's tail, the end before a gap). In rings every member
      // pushes: nothing to spare them for (64 hosts in 4 rings without a scheduler: 0.57 of the bound
      // with this, 0.74 without).
      pushedOnly.push(best);
      for (const piece of drawn) if (piece !== best.piece) forget(piece);
      continue;
    }
    if (best !== undefined) {
      fromPeer(best.piece, best.holders);
      // The other drawn pieces may be drawn again for the next fetch.
      for (const piece of drawn) if (piece !== best.piece) forget(piece);
      continue;
    }
    if (!readsOrigin) continue;
    for (const piece of unheld) {
      if (originReads < limits.originReadsMax && running < limits.downloadsMax && mine(piece))
        fromOrigin(piece);
      else elsewhere.push(piece);
    }
  }
  // Idle otherwise: a piece another rack holds, outside this host's rack stripe (its rack-mate may be
  // gone), or else a piece from outside the stripe (its host may be gone), so nothing waits forever.
  if (running === 0 && remote.length > 0) {
    const chosen = remote[random.below(remote.length)] as { piece: number; holders: FallbackPeer<P>[] };
    fromPeer(chosen.piece, chosen.holders);
    return picks;
  }
  if (running === 0 && pushedOnly.length > 0) {
    const chosen = pushedOnly[random.below(pushedOnly.length)] as {
      piece: number;
      holders: FallbackPeer<P>[];
    };
    fromPeer(chosen.piece, chosen.holders);
    return picks;
  }
  if (running === 0 && elsewhere.length > 0 && originReads < limits.originReadsMax) {
    fromOrigin(takeRandom(elsewhere, random));
  }
  return picks;
}
/**
 * Whether a drawn piece with these holders is a better fetch than the best so far: one a holder
 * that pushes nothing has comes first (the rarest pieces are the newest, which only the hosts
 * pushing them on hold yet: fetching those would slow their chains), then the rarer.
 */
function betterSource<P>(holders: FallbackPeer<P>[], best: FallbackPeer<P>[]): boolean {
  const idle = holders[0]?.ring?.pushing !== true;
  const bestIdle = best[0]?.ring?.pushing !== true;
  if (idle !== bestIdle) return idle;
  return holders.length < best.length;
}

/** Random draws tried before the wanted pieces are listed (most draws hit while most are wanted). */
const REJECTION_DRAWS = 16;

function wantedPieces<P>(view: FallbackView<P>, tried: ReadonlySet<number>): number[] {
  const out: number[] = [];
  for (let piece = 0; piece < view.pieceCount; piece++) {
    if (!tried.has(piece) && !view.urgent.has(piece) && !view.holds(piece) && !view.fetching(piece))
      out.push(piece);
  }
  return out;
}

/** Removes and returns a uniformly chosen element (swapping the last into its place). */
function takeRandom(values: number[], random: Random): number {
  const index = random.below(values.length);
  const value = values[index] as number;
  values[index] = values[values.length - 1] as number;
  values.pop();
  return value;
}
