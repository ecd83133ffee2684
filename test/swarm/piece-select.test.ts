import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newBitfield, setBit } from '../../src/swarm/core/bitfield.js';
import { InFlightPieces } from '../../src/swarm/core/in-flight.js';
import {
  missingListMax,
  MISSING_WINDOW,
  MISSING_WINDOW_SMALL_SWARM,
  MissingLists,
  Pick,
  pickByWalk,
  pickFromMissing,
  type HostPieces,
  type ParentFinder,
} from '../../src/swarm/core/piece-select.js';
import { Random } from '../../src/swarm/core/random.js';
import { RarityIndex } from '../../src/swarm/core/rarity.js';

const PIECES = 60;

/** Piece p has 1 + (p % 4) copies; parents are available for the pieces in `available`. */
function setup(seed: number): { rarity: RarityIndex; random: Random } {
  const random = new Random(seed);
  const rarity = new RarityIndex(PIECES, 8, random);
  for (let piece = 0; piece < PIECES; piece++) for (let c = 0; c <= piece % 4; c++) rarity.increment(piece);
  return { rarity, random };
}

function finder(available: (piece: number) => boolean): ParentFinder & { asked: number[] } {
  const asked: number[] = [];
  return {
    asked,
    findParent: (_host, piece) => {
      asked.push(piece);
      return available(piece) ? 100 + piece : -1;
    },
  };
}

function target(held: number[], inFlight: number[]): HostPieces {
  const h = newBitfield(PIECES);
  for (const p of held) setBit(h, p);
  const f = new InFlightPieces(Math.max(1, inFlight.length));
  f.ensureHosts(1);
  for (const p of inFlight) f.add(0, p);
  return { host: 0, held: h, inFlight: f };
}

test('the walk picks from the rarest bucket the host lacks, skipping held and in-flight pieces', () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const { rarity, random } = setup(seed);
    const pick = new Pick();
    // Held: half of the 1-copy pieces; in flight: the rest of them. Next rarest are the 2-copy pieces.
    const ones = Array.from({ length: PIECES }, (_, p) => p).filter((p) => p % 4 === 0);
    const t = target(ones.slice(0, 7), ones.slice(7));
    assert.ok(
      pickByWalk(
        rarity,
        t,
        random,
        finder(() => true),
        pick,
        16,
        Infinity,
      ),
      `seed ${seed}`,
    );
    assert.equal(
      pick.piece % 4,
      1,
      `seed ${seed}: picked piece ${pick.piece} with ${rarity.count[pick.piece]} copies`,
    );
    assert.equal(pick.parent, 100 + pick.piece);
  }
});

test('the walk passes over pieces with no available parent to the next rarest', () => {
  const seed = 8;
  const { rarity, random } = setup(seed);
  const pick = new Pick();
  const f = finder((p) => p % 4 === 2);
  assert.ok(pickByWalk(rarity, target([], []), random, f, pick, 40, Infinity));
  assert.equal(rarity.count[pick.piece], 3, `seed ${seed}`);
  assert.ok(
    f.asked.every((p) => rarity.count[p]! <= 3),
    `seed ${seed}: asked about a commoner piece first`,
  );
  assert.equal(
    pickByWalk(
      rarity,
      target([], []),
      random,
      finder(() => false),
      pick,
      40,
      Infinity,
    ),
    false,
  );
  const limited = finder(() => false);
  assert.equal(pickByWalk(rarity, target([], []), random, limited, pick, 5, Infinity), false);
  assert.equal(limited.asked.length, 5, 'the walk asks for at most checksMax parents');
  const below = finder((p) => p % 4 === 2);
  assert.equal(
    pickByWalk(rarity, target([], []), random, below, pick, 40, 3),
    false,
    'no piece under 3 copies has a parent',
  );
  assert.ok(below.asked.every((p) => rarity.count[p]! < 3));
});

test('ties are broken at random: different seeds choose different pieces, not file order', () => {
  const chosen = new Set<number>();
  const firsts: number[] = [];
  for (let seed = 1; seed <= 20; seed++) {
    const { rarity, random } = setup(seed);
    const pick = new Pick();
    pickByWalk(
      rarity,
      target([], []),
      random,
      finder(() => true),
      pick,
      16,
      Infinity,
    );
    chosen.add(pick.piece);
    firsts.push(pick.piece);
    assert.equal(pick.piece % 4, 0, `seed ${seed}`);
  }
  assert.ok(chosen.size >= 5, `20 seeds chose only ${chosen.size} distinct pieces: ${firsts.join(',')}`);
  assert.ok(
    firsts.some((p) => p !== 0),
    'always the first piece in file order',
  );
});

test('the missing list picks the rarest piece with a parent and forgets pieces that arrived', () => {
  for (const seed of [1, 2, 3]) {
    const { rarity, random } = setup(seed);
    const lacking = [5, 6, 7, 8, 13, 22, 40];
    const held = Array.from({ length: PIECES }, (_, p) => p).filter((p) => !lacking.includes(p));
    const t = target(held, [8]);
    const lists = new MissingLists();
    lists.build(0, t.held, PIECES, random);
    assert.equal(lists.length(0), lacking.length);
    const pick = new Pick();
    // Piece 8 (1 copy) is in flight; 40 (1 copy) has no parent; so the rarest is 5 or 13 (2 copies).
    assert.ok(
      pickFromMissing(
        lists,
        rarity,
        t,
        random,
        finder((p) => p !== 40),
        pick,
        32,
        MISSING_WINDOW_SMALL_SWARM,
      ),
      `seed ${seed}`,
    );
    assert.ok([5, 13].includes(pick.piece), `seed ${seed}: picked ${pick.piece}`);
    setBit(t.held, 5);
    setBit(t.held, 13);
    assert.ok(
      pickFromMissing(
        lists,
        rarity,
        t,
        random,
        finder((p) => p !== 40),
        pick,
        32,
        MISSING_WINDOW_SMALL_SWARM,
      ),
    );
    assert.ok([6, 22].includes(pick.piece), `seed ${seed}: picked ${pick.piece}, which arrived`);
    lists.compact(0, t.held, 5);
    assert.equal(lists.length(0), lacking.length, 'two arrivals of seven are not worth a compaction');
    setBit(t.held, 6);
    setBit(t.held, 22);
    lists.compact(0, t.held, 3);
    assert.deepEqual(
      Array.from({ length: lists.length(0) }, (_, i) => lists.at(0, i)).sort((a, b) => a - b),
      [7, 8, 40],
      'arrived pieces leave the list once they are half of it',
    );
  }
});

test('the missing list is scanned in a bounded window', () => {
  const seed = 9;
  const { rarity, random } = setup(seed);
  const t = target([], []);
  const lists = new MissingLists();
  lists.build(0, t.held, PIECES, random);
  assert.equal(lists.length(0), PIECES);
  const asked = finder(() => false);
  assert.equal(pickFromMissing(lists, rarity, t, random, asked, new Pick(), 1000, MISSING_WINDOW), false);
  assert.ok(asked.asked.length <= MISSING_WINDOW, `seed ${seed}: asked about ${asked.asked.length} pieces`);
});

test('the missing list threshold is 1% of the pieces, within bounds', () => {
  assert.equal(missingListMax(100), MISSING_WINDOW_SMALL_SWARM);
  assert.equal(missingListMax(20_000), 200);
  assert.equal(missingListMax(10_000_000), 1024);
});
