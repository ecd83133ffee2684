import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newBitfield, setBit } from '../../src/swarm/core/bitfield.js';
import { InFlightPieces } from '../../src/swarm/core/in-flight.js';
import { rarestInWindow, RECENT_PIECES, RecentPieces } from '../../src/swarm/core/offer.js';
import type { HostPieces } from '../../src/swarm/core/piece-select.js';
import { Random } from '../../src/swarm/core/random.js';
import { RarityIndex } from '../../src/swarm/core/rarity.js';

function target(pieces: number, held: number[], inFlight: number[]): HostPieces {
  const bits = newBitfield(pieces);
  for (const p of held) setBit(bits, p);
  const flight = new InFlightPieces(4);
  flight.ensureHosts(1);
  for (const p of inFlight) flight.add(0, p);
  return { host: 0, held: bits, inFlight: flight };
}

test('a parent offers its newest recent piece the host lacks and has not in flight', () => {
  const recent = new RecentPieces();
  recent.ensureHosts(3);
  recent.clear(2);
  assert.equal(recent.newestLacking(2, target(100, [], [])), -1, 'nothing verified yet');
  for (const piece of [10, 11, 12, 13]) recent.push(2, piece);
  assert.equal(recent.newestLacking(2, target(100, [], [])), 13);
  assert.equal(recent.newestLacking(2, target(100, [13], [12])), 11);
  assert.equal(recent.newestLacking(2, target(100, [10, 11, 12, 13], [])), -1);
  for (let piece = 20; piece < 20 + RECENT_PIECES; piece++) recent.push(2, piece);
  assert.equal(
    recent.newestLacking(2, target(100, range(20, 20 + RECENT_PIECES), [])),
    -1,
    'old pieces are forgotten',
  );
  recent.ensureHosts(50);
  assert.equal(recent.newestLacking(2, target(100, [], [])), 20 + RECENT_PIECES - 1, 'rings survive growth');
});

test('the window gives the rarest piece the parent has and the host lacks', () => {
  for (const seed of [1, 2, 3]) {
    const random = new Random(seed);
    const pieces = 64;
    const rarity = new RarityIndex(pieces, 8, random);
    for (let p = 0; p < pieces; p++) for (let c = 0; c <= p % 5; c++) rarity.increment(p);
    const parentHeld = newBitfield(pieces);
    for (const p of [3, 6, 10, 15, 40]) setBit(parentHeld, p);
    // 10 and 15 have one copy (p % 5 === 0); 15 is in flight, so 10; the window covers both words.
    assert.equal(rarestInWindow(parentHeld, target(pieces, [40], [15]), rarity, random), 10, `seed ${seed}`);
    assert.equal(rarestInWindow(parentHeld, target(pieces, [3, 6, 10, 15, 40], []), rarity, random), -1);
  }
});

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i);
}
