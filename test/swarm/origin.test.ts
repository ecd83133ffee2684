import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newBitfield, setBit } from '../../src/swarm/core/bitfield.js';
import { OriginPolicy } from '../../src/swarm/core/origin.js';
import { Random } from '../../src/swarm/core/random.js';
import { RarityIndex } from '../../src/swarm/core/rarity.js';

test('picks only pieces no host holds and none already coming from the origin', () => {
  for (const seed of [1, 2, 3, 4]) {
    const random = new Random(seed);
    const rarity = new RarityIndex(20, 4, random);
    for (let piece = 0; piece < 15; piece++) rarity.increment(piece);
    const origin = new OriginPolicy(20, 10, undefined);
    origin.ensureHosts(4);
    const picked = new Set<number>();
    const held = newBitfield(20);
    for (let i = 0; i < 5; i++) {
      assert.ok(origin.hasUnserved(rarity), `seed ${seed}`);
      const piece = origin.pickUnserved(rarity, random, held);
      assert.ok(piece >= 15, `seed ${seed}: picked piece ${piece}, which a host holds`);
      assert.ok(!picked.has(piece), `seed ${seed}: piece ${piece} picked twice`);
      picked.add(piece);
      origin.start(i % 4, piece);
    }
    assert.equal(origin.hasUnserved(rarity), false, `seed ${seed}`);
    assert.equal(origin.pickUnserved(rarity, random, held), -1);
    assert.equal(origin.active, 5);
    const first = [...picked][0]!;
    origin.finish(0, first, false);
    assert.equal(
      origin.pickUnserved(rarity, random, held),
      first,
      `seed ${seed}: a failed first copy is served again`,
    );
  }
});

test('a host that holds an uncounted piece (banned host) is not sent it', () => {
  const random = new Random(5);
  const rarity = new RarityIndex(3, 2, random);
  const origin = new OriginPolicy(3, 4, undefined);
  origin.ensureHosts(1);
  const held = newBitfield(3);
  setBit(held, 0);
  setBit(held, 1);
  for (let i = 0; i < 20; i++) assert.equal(origin.pickUnserved(rarity, random, held), 2);
});

test('readers and per-host share: one per host at scale, more when hosts are few', () => {
  const origin = new OriginPolicy(10, 8, undefined);
  assert.equal(origin.perHostMax(1000, 4), 1);
  assert.equal(origin.perHostMax(8, 4), 1);
  assert.equal(origin.perHostMax(4, 4), 2);
  assert.equal(origin.perHostMax(1, 4), 4, 'never more than the download slots');
  assert.equal(new OriginPolicy(10, 8, 3).perHostMax(1000, 4), 3, 'configured share wins');
  origin.ensureHosts(1);
  for (let i = 0; i < 8; i++) {
    assert.ok(origin.hasFreeReader());
    origin.start(0, i);
  }
  assert.equal(origin.hasFreeReader(), false);
  assert.equal(origin.transfersTo(0), 8);
});

test('turns: a host waits for about half of the others before its next origin transfer', () => {
  const origin = new OriginPolicy(100, 4, undefined);
  origin.ensureHosts(24);
  assert.ok(origin.hasTurn(0, 24, 1), 'a host that never had one has its turn');
  origin.start(0, 0);
  origin.finish(0, 0, false);
  // (24 downloading - 4 readers) / 2 = 10 other origin transfers must start first.
  for (let i = 1; i <= 10; i++) {
    assert.equal(origin.hasTurn(0, 24, 1), false, `after ${i - 1} others`);
    origin.start(i, i);
  }
  assert.ok(origin.hasTurn(0, 24, 1));
  assert.ok(origin.hasTurn(1, 24, 2), 'no turns while a host may have several origin transfers');
  origin.join(5);
  assert.ok(origin.hasTurn(5, 24, 1), 'a host that rejoins has its turn at once');
});

test("turns: a host allowed every reader (a chain's head) never waits for others' turns", () => {
  // A chain with one reader: the head may take it (per-host cap 1 = readers), and nobody else takes
  // first copies, so waiting for (8 - 1) / 2 other origin transfers would wait for ever.
  const chain = new OriginPolicy(100, 1, 1);
  chain.ensureHosts(8);
  chain.start(0, 0);
  chain.finish(0, 0, false);
  assert.ok(chain.hasTurn(0, 8, 1));
  // Without that cap (per piece, one reader for eight hosts), turns still apply.
  const perPiece = new OriginPolicy(100, 1, undefined);
  perPiece.ensureHosts(8);
  perPiece.start(0, 0);
  perPiece.finish(0, 0, false);
  assert.equal(perPiece.hasTurn(0, 8, 1), false);
});
