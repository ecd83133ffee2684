import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  FALLBACK_BUSY_STREAK_MAX,
  FALLBACK_DRAWS,
  FALLBACK_FEED_QUIET_MS,
  FALLBACK_ROUNDS_MAX,
  afterPeerFetch,
  orphanMove,
  pickFallbackFetches,
  ringFeedDelivers,
  type FallbackView,
} from '../../src/swarm/core/fallback.js';
import { Random } from '../../src/swarm/core/random.js';

const SEED = 41;

function view(overrides: Partial<FallbackView<string>> = {}): FallbackView<string> {
  return {
    pieceCount: 16,
    holds: () => false,
    fetching: () => false,
    urgent: new Set(),
    peers: [],
    running: 0,
    originReads: 0,
    ...overrides,
  };
}

const limits = { downloadsMax: 4, originReadsMax: 2 };

test(`fallback: pieces some peer holds come from a holder, never twice, never held or fetching ones (seed ${SEED})`, () => {
  const held = new Set([0, 1, 2]);
  const fetching = new Set([3]);
  const picks = pickFallbackFetches(
    view({
      holds: (piece) => held.has(piece),
      fetching: (piece) => fetching.has(piece),
      peers: [
        { peer: 'a', pieces: new Set([0, 3, 4, 5, 6, 7]) },
        { peer: 'b', pieces: new Set([4, 5, 6, 7, 8]) },
      ],
    }),
    limits,
    new Random(SEED),
  );
  assert.equal(picks.length, 4);
  assert.equal(new Set(picks.map((pick) => pick.piece)).size, 4, 'no piece twice');
  const holdable = [4, 5, 6, 7, 8];
  for (const pick of picks) {
    assert.ok(!held.has(pick.piece) && !fetching.has(pick.piece), `piece ${pick.piece} is held or fetching`);
    if (pick.source.kind === 'peer') {
      const holder = pick.source.peer === 'a' ? [0, 3, 4, 5, 6, 7] : [4, 5, 6, 7, 8];
      assert.ok(holder.includes(pick.piece), `${pick.source.peer} does not hold ${pick.piece}`);
    } else {
      assert.ok(!holdable.includes(pick.piece), `piece ${pick.piece} had holders but went to the origin`);
    }
  }
  assert.ok(picks.filter((pick) => pick.source.kind === 'peer').length >= 2, 'held pieces came from peers');
});

test('fallback: blocked pieces come first, from the origin when no peer has them, within the origin cap', () => {
  const picks = pickFallbackFetches(
    view({ urgent: new Set([9, 5, 12]), peers: [{ peer: 'a', pieces: new Set([12]) }] }),
    limits,
    new Random(SEED),
  );
  assert.deepEqual(
    picks.slice(0, 3).map((pick) => [pick.piece, pick.source.kind]),
    [
      [5, 'origin'],
      [9, 'origin'],
      [12, 'peer'],
    ],
  );
  assert.ok(picks.filter((pick) => pick.source.kind === 'origin').length <= limits.originReadsMax);
  assert.ok(picks.length <= limits.downloadsMax);
});

test('fallback: of the drawn pieces the rarest among the peers goes first', () => {
  // Piece 0 is on every peer, piece 1 on one: with both drawn, 1 must win.
  const picks = pickFallbackFetches(
    view({
      pieceCount: 2,
      peers: [
        { peer: 'a', pieces: new Set([0, 1]) },
        { peer: 'b', pieces: new Set([0]) },
        { peer: 'c', pieces: new Set([0]) },
      ],
    }),
    { downloadsMax: 1, originReadsMax: 2 },
    new Random(SEED),
  );
  assert.deepEqual(picks, [{ piece: 1, source: { kind: 'peer', peer: 'a' } }]);
});

test('fallback: the origin serves only this host its stripe, unless the host has nothing else to do', () => {
  const stripe = { index: 1, count: 4 };
  const busy = pickFallbackFetches(view({ stripe, running: 1 }), limits, new Random(SEED));
  assert.ok(busy.length > 0);
  for (const pick of busy) {
    assert.equal(pick.source.kind, 'origin');
    assert.equal(pick.piece % 4, 1, `piece ${pick.piece} is outside the stripe`);
  }
  assert.ok(busy.length <= limits.originReadsMax);
  // Every piece of the stripe is held: an idle host reads one other piece (its stripe's host may be gone).
  const idle = pickFallbackFetches(
    view({ stripe, holds: (piece) => piece % 4 === 1 }),
    limits,
    new Random(SEED),
  );
  assert.equal(idle.length, 1);
  assert.notEqual((idle[0]?.piece ?? -1) % 4, 1);
  // Not idle (a fetch is running): it waits for the others' pieces instead.
  assert.deepEqual(
    pickFallbackFetches(
      view({ stripe, running: 1, holds: (piece) => piece % 4 === 1 }),
      limits,
      new Random(SEED),
    ),
    [],
  );
});

test('fallback: nothing at the limits or with everything held; a peer that did not answer is not used', () => {
  assert.deepEqual(pickFallbackFetches(view({ running: 4 }), limits, new Random(SEED)), []);
  assert.deepEqual(pickFallbackFetches(view({ holds: () => true }), limits, new Random(SEED)), []);
  const picks = pickFallbackFetches(
    view({ peers: [{ peer: 'silent', pieces: undefined }], originReads: 2 }),
    limits,
    new Random(SEED),
  );
  assert.deepEqual(picks, []);
});

test('fallback: a busy peer is no source, but what it holds is not read from the origin meanwhile', () => {
  const stripe = { index: 1, count: 4 };
  const all = { has: () => true };
  // Idle, its stripe held: without the busy peer it would read another stripe's piece from the origin.
  const idle = view({ stripe, holds: (piece) => piece % 4 === 1 });
  assert.equal(pickFallbackFetches(idle, limits, new Random(SEED)).length, 1);
  assert.deepEqual(
    pickFallbackFetches(
      { ...idle, peers: [{ peer: 'busy', pieces: all, busy: true }] },
      limits,
      new Random(SEED),
    ),
    [],
    'it waits for the busy peer instead',
  );
  // Its own stripe too: a piece the busy peer holds waits for it; the others come from the origin.
  const heldByBusy = { has: (piece: number) => piece === 5 };
  const own = pickFallbackFetches(
    view({ stripe, peers: [{ peer: 'busy', pieces: heldByBusy, busy: true }] }),
    limits,
    new Random(SEED),
  );
  assert.ok(own.length > 0);
  for (const pick of own) {
    assert.equal(pick.source.kind, 'origin');
    assert.notEqual(pick.piece, 5);
  }
  // The same peer, no longer busy (its map read again), is a source.
  const again = pickFallbackFetches(
    view({ stripe, running: 1, holds: (piece) => piece % 4 === 1, peers: [{ peer: 'back', pieces: all }] }),
    limits,
    new Random(SEED),
  );
  assert.ok(again.length > 0);
  for (const pick of again) assert.deepEqual(pick.source, { kind: 'peer', peer: 'back' });
});

test('fallback: a peer that only ever answers busy stops holding its pieces back from the origin', () => {
  let streak = 0;
  const maps: string[] = [];
  for (let answer = 0; answer < FALLBACK_BUSY_STREAK_MAX + 2; answer++) {
    const after = afterPeerFetch(streak, 'busy');
    streak = after.streak;
    maps.push(after.map);
  }
  assert.deepEqual(maps, [...Array<string>(FALLBACK_BUSY_STREAK_MAX).fill('busy'), 'drop', 'drop']);
  // A piece served starts the count again; any other failure drops the map at once, as before.
  assert.deepEqual(afterPeerFetch(streak, 'verified'), { streak: 0, map: 'keep' });
  assert.deepEqual(afterPeerFetch(0, 'failed'), { streak: 0, map: 'drop' });
});

test('fallback: one call looks at a bounded number of pieces, however large the model', () => {
  // Every piece is held only by a busy peer: nothing can be fetched now, and the call gives up after
  // FALLBACK_ROUNDS_MAX rounds of draws instead of looking at all 100,000 pieces.
  let looked = 0;
  const picks = pickFallbackFetches(
    view({
      pieceCount: 100_000,
      running: 1,
      holds: () => {
        looked++;
        return false;
      },
      peers: [{ peer: 'busy', pieces: { has: () => true }, busy: true }],
    }),
    limits,
    new Random(SEED),
  );
  assert.deepEqual(picks, []);
  assert.ok(looked <= 16 * FALLBACK_DRAWS * FALLBACK_ROUNDS_MAX, `${looked} pieces looked at`);
});

test('fallback with racks: rack-mates first; a piece only other racks hold comes in through one host', () => {
  const rackStripe = { index: 0, count: 2 };
  const every = { has: () => true };
  // Piece 0 is held by a rack-mate and by another rack: the rack-mate is the source.
  const both = pickFallbackFetches(
    view({
      rackStripe,
      holds: (piece) => piece !== 0,
      peers: [
        { peer: 'remote', pieces: every },
        { peer: 'mate', pieces: every, sameRack: true },
      ],
    }),
    limits,
    new Random(SEED),
  );
  assert.deepEqual(both, [{ piece: 0, source: { kind: 'peer', peer: 'mate' } }]);
  // Only another rack holds them: this host brings in its rack stripe's pieces (even ones), not the others.
  const remoteOnly = view({ rackStripe, running: 1, peers: [{ peer: 'remote', pieces: every }] });
  const brought = pickFallbackFetches(remoteOnly, limits, new Random(SEED));
  assert.ok(brought.length > 0);
  for (const pick of brought) {
    assert.deepEqual(pick.source, { kind: 'peer', peer: 'remote' });
    assert.equal(pick.piece % 2, 0, `piece ${pick.piece} is its rack-mate's to bring in`);
  }
  // Idle, with only the other stripe's pieces left: one of them, so a rack-mate that is gone stalls nothing.
  const idle = pickFallbackFetches(
    view({ rackStripe, holds: (piece) => piece % 2 === 0, peers: [{ peer: 'remote', pieces: every }] }),
    limits,
    new Random(SEED),
  );
  assert.equal(idle.length, 1);
  assert.equal((idle[0]?.piece ?? 0) % 2, 1);
});

test(`fallback: the same seed picks the same fetches (seed ${SEED})`, () => {
  const shape = (): FallbackView<string> =>
    view({
      pieceCount: 64,
      peers: [
        { peer: 'a', pieces: new Set(Array.from({ length: 32 }, (_, i) => i * 2)) },
        { peer: 'b', pieces: new Set(Array.from({ length: 20 }, (_, i) => i * 3)) },
      ],
    });
  const a = pickFallbackFetches(shape(), limits, new Random(SEED));
  const b = pickFallbackFetches(shape(), limits, new Random(SEED));
  assert.deepEqual(a, b);
});

test(`fallback, ring mode: a chain member whose feed delivers fetches blocked pieces only (seed ${SEED})`, () => {
  const peers = [{ peer: 'a', pieces: new Set([0, 1, 2, 3, 4, 5]) }];
  const fed = pickFallbackFetches(
    view({ urgent: new Set([7]), peers, ring: { fed: true, head: false, chain: true } }),
    limits,
    new Random(SEED),
  );
  assert.deepEqual(
    fed.map((pick) => [pick.piece, pick.source.kind]),
    [[7, 'origin']],
  );
  // The same host without a delivering feed takes what it can.
  const unfed = pickFallbackFetches(
    view({ urgent: new Set([7]), peers, ring: { fed: false, head: false, chain: true } }),
    limits,
    new Random(SEED),
  );
  assert.equal(unfed.length, limits.downloadsMax);
  // A ring has no head reading for it: a member its feed still delivers to fetches as any host does.
  const inRing = pickFallbackFetches(
    view({ urgent: new Set([7]), peers, ring: { fed: true, head: false, chain: false } }),
    limits,
    new Random(SEED),
  );
  assert.deepEqual(inRing, unfed);
});

test(`fallback, ring mode: a chain's head reads every unheld piece from the origin, not its stripe alone, and no other member reads it (seed ${SEED})`, () => {
  // Stripe 1 of 8: pieces 1 and 9 of 16 are its. Nobody else holds anything.
  const stripe = { index: 1, count: 8 };
  const head = pickFallbackFetches(
    view({ stripe, ring: { fed: false, head: true, chain: true } }),
    { downloadsMax: 4, originReadsMax: 4 },
    new Random(SEED),
  );
  assert.equal(head.length, 4);
  assert.ok(head.every((pick) => pick.source.kind === 'origin'));
  assert.ok(
    head.some((pick) => pick.piece % stripe.count !== stripe.index),
    'pieces outside the stripe are read too',
  );
  // Another member of the chain leaves the origin to its head; a host in no chain keeps to its stripe.
  const member = pickFallbackFetches(
    view({ stripe, ring: { fed: false, head: false, chain: true } }),
    { downloadsMax: 4, originReadsMax: 4 },
    new Random(SEED),
  );
  assert.deepEqual(member, []);
  const other = pickFallbackFetches(
    view({ stripe }),
    { downloadsMax: 4, originReadsMax: 4 },
    new Random(SEED),
  );
  assert.ok(other.length > 0);
  assert.ok(other.every((pick) => pick.piece % stripe.count === stripe.index));
});

test('fallback, ring mode: an open feed counts as delivering while it pushes, and not once quiet', () => {
  const since = 1000;
  assert.equal(ringFeedDelivers(false, since, since, since), false, 'a closed feed delivers nothing');
  // Just on its own: the head gets a moment to start reading the origin.
  assert.equal(ringFeedDelivers(true, undefined, since, since + FALLBACK_FEED_QUIET_MS - 1), true);
  assert.equal(ringFeedDelivers(true, undefined, since, since + FALLBACK_FEED_QUIET_MS), false);
  // A push long before the member went on its own does not stretch the moment.
  assert.equal(ringFeedDelivers(true, 0, since, since + FALLBACK_FEED_QUIET_MS), false);
  // Pushes keep it delivering.
  const push = since + 10 * FALLBACK_FEED_QUIET_MS;
  assert.equal(ringFeedDelivers(true, push, since, push + FALLBACK_FEED_QUIET_MS - 1), true);
  assert.equal(ringFeedDelivers(true, push, since, push + FALLBACK_FEED_QUIET_MS), false);
});

test(`fallback, ring mode: a holder that pushes to nobody is the source, though only the pushing ones hold the rarest pieces (seeds ${SEED}-${SEED + 7})`, () => {
  // Pieces 0-7: the idle peer holds them all; 8-15 only the peers that push (the newest pieces).
  const all = new Set(Array.from({ length: 16 }, (_, i) => i));
  const older = new Set(Array.from({ length: 8 }, (_, i) => i));
  const pushing = { pushing: true, flowing: true, held: 16 };
  const withRing = [
    { peer: 'head', pieces: all, ring: pushing },
    { peer: 'next', pieces: all, ring: pushing },
    { peer: 'idle', pieces: older, ring: { pushing: false, flowing: true, held: 8 } },
  ];
  let byRarity = 0;
  for (let seed = SEED; seed < SEED + 8; seed++) {
    const picks = pickFallbackFetches(view({ peers: withRing }), limits, new Random(seed));
    assert.equal(picks.length, limits.downloadsMax, `seed ${seed}`);
    for (const pick of picks) {
      assert.deepEqual(pick.source, { kind: 'peer', peer: 'idle' }, `seed ${seed}: piece ${pick.piece}`);
      assert.ok(pick.piece < 8);
    }
    // By rarity alone (no ring in the maps) most would come from the pushing peers.
    const plain = withRing.map(({ peer, pieces }) => ({ peer, pieces }));
    for (const pick of pickFallbackFetches(view({ peers: plain }), limits, new Random(seed)))
      if (pick.source.kind === 'peer' && pick.source.peer === 'idle') byRarity++;
  }
  assert.ok(byRarity <= 8, `${byRarity} of 32 picks from the idle peer by rarity alone`);
  // Once the idle peer has nothing it lacks, a pushing one is the source: one fetch at a time.
  const late = pickFallbackFetches(
    view({ peers: withRing, holds: (piece) => piece < 8 }),
    limits,
    new Random(SEED),
  );
  assert.equal(late.length, 1);
  assert.ok(late[0]!.source.kind === 'peer' && late[0]!.source.peer !== 'idle');
  const busy = pickFallbackFetches(
    view({ peers: withRing, holds: (piece) => piece < 8, running: 1 }),
    limits,
    new Random(SEED),
  );
  assert.deepEqual(busy, [], 'not while another fetch runs');
});

test('fallback, ring mode: a chain member whose feed ended subscribes again, moves up to the end of the chain ahead, or leads', () => {
  const ring = (pushing: boolean, flowing: boolean, held: number, parent?: string) => ({
    pushing,
    flowing,
    held,
    ...(parent === undefined ? {} : { parent }),
  });
  const some = new Set([0]);
  // Its last parent answers and pushes to nobody (a piece passed on was lost): that one again.
  assert.deepEqual(
    orphanMove(
      'me',
      40,
      [
        { peer: 'ahead', pieces: some, ring: ring(false, true, 90) },
        { peer: 'parent', pieces: some, ring: ring(false, false, 38) },
      ],
      'parent',
    ),
    { kind: 'subscribe', peer: 'parent' },
  );
  // Its parent is gone (no answer): of the flowing peers holding more whose feed comes from the
  // head, the one that holds the most and pushes to nobody; never one behind it (holding less),
  // one that pushes, or one fed by a host on its own ('loose', fed by 'stray', which has no parent).
  const peers = [
    { peer: 'parent', pieces: undefined },
    { peer: 'head', pieces: some, ring: { ...ring(true, true, 95), head: true } },
    { peer: 'gap', pieces: some, ring: ring(false, true, 90, 'mid') },
    { peer: 'mid', pieces: some, ring: ring(true, true, 92, 'head') },
    { peer: 'stuck', pieces: some, ring: ring(false, false, 99) },
    { peer: 'behind', pieces: some, ring: ring(false, true, 30, 'me') },
    { peer: 'loose', pieces: some, ring: ring(false, true, 98, 'stray') },
    { peer: 'stray', pieces: some, ring: ring(true, false, 97) },
  ];
  const named = (...names: string[]) => peers.filter((peer) => names.includes(peer.peer));
  assert.deepEqual(orphanMove('me', 40, peers, 'parent'), { kind: 'subscribe', peer: 'gap' });
  // Every one ahead pushes already, or hangs from no head: it fetches as any host on its own.
  assert.deepEqual(orphanMove('me', 40, named('head', 'mid', 'behind', 'loose', 'stray'), 'parent'), {
    kind: 'fetch',
  });
  // Its parent just died and the head, which pushed to it, does not know yet: the head holds no
  // more than this host (everything was passed on as it arrived), but it is alive: no second
  // reader of the origin, it fetches as any host until the head pushes to nobody.
  const head = { peer: 'head', pieces: some, ring: { ...ring(true, true, 40), head: true } };
  assert.deepEqual(orphanMove('me', 40, [{ peer: 'parent', pieces: undefined }, head], 'parent'), {
    kind: 'fetch',
  });
  assert.deepEqual(
    orphanMove('me', 40, [{ ...head, ring: { ...head.ring, pushing: false } }], 'parent'),
    { kind: 'subscribe', peer: 'head' },
    'then it subscribes to the head itself',
  );
  // Nobody ahead (its chain's head died): it reads for the rest of the chain.
  assert.deepEqual(orphanMove('me', 40, named('parent', 'stuck', 'behind'), 'parent'), { kind: 'head' });
  // Never one fed, parent by parent, from this host: that closes a loop nobody feeds.
  const loop = [
    { peer: 'child', pieces: some, ring: ring(true, true, 39, 'me') },
    { peer: 'tail', pieces: some, ring: ring(false, true, 50, 'child') },
  ];
  assert.deepEqual(orphanMove('me', 40, loop, 'tail'), { kind: 'fetch' }, 'not even its last parent');
  // Peers outside ring mode (no ring in their maps) are nobody to subscribe to.
  assert.deepEqual(orphanMove('me', 0, [{ peer: 'x', pieces: some }], undefined), { kind: 'head' });
});
