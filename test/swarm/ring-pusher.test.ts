/** The ring pusher (src/swarm/core/ring-pusher.ts): what a ring parent pushes its child, in order. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newBitfield, setBit } from '../../src/swarm/core/bitfield.js';
import { RingPusher } from '../../src/swarm/core/ring-pusher.js';

function bits(count: number, pieces: number[]): Uint32Array {
  const field = newBitfield(count);
  for (const piece of pieces) setBit(field, piece);
  return field;
}

function drain(pusher: RingPusher): number[] {
  const out: number[] = [];
  for (let piece = pusher.next(); piece >= 0; piece = pusher.next()) out.push(piece);
  return out;
}

test('the backlog is what the parent holds and the child lacks, in piece order; then new pieces in order', () => {
  const pusher = new RingPusher(70);
  pusher.verified(3);
  assert.equal(pusher.next(), -1, 'nothing is pushed without a subscriber');
  pusher.subscribe(bits(70, [1, 64]), bits(70, [64, 1, 40, 2, 69]));
  assert.equal(pusher.queued, 3);
  pusher.verified(10);
  pusher.verified(5);
  pusher.verified(10);
  pusher.verified(1);
  assert.deepEqual(drain(pusher), [2, 40, 69, 10, 5]);
  pusher.verified(5);
  assert.equal(pusher.next(), -1, 'a piece pushed is the child’s');
});

test('pieces the child gains some other way are skipped, queued or not', () => {
  const pusher = new RingPusher(32);
  pusher.subscribe(bits(32, []), bits(32, [0, 1, 2]));
  pusher.childHas(1);
  pusher.childHas(7);
  pusher.verified(7);
  pusher.verified(8);
  pusher.childHas(99);
  pusher.verified(-1);
  pusher.verified(1.5);
  assert.deepEqual(drain(pusher), [0, 2, 8]);
});

test('a new subscription replaces the old; unsubscribing stops the pushes', () => {
  const pusher = new RingPusher(16);
  pusher.subscribe(bits(16, []), bits(16, [4, 5]));
  assert.equal(pusher.next(), 4);
  pusher.subscribe(bits(16, [5]), bits(16, [4, 5, 6]));
  assert.deepEqual(drain(pusher), [4, 6], 'the new child gets its own backlog');
  pusher.unsubscribe();
  assert.equal(pusher.subscribed, false);
  pusher.verified(9);
  assert.equal(pusher.next(), -1);
  assert.throws(() => pusher.subscribe(bits(64, []), bits(16, [])), /bitfield size/);
});

test('a long run keeps its order and compacts its queue', () => {
  const count = 5000;
  const pusher = new RingPusher(count);
  pusher.subscribe(bits(count, []), bits(count, []));
  const order: number[] = [];
  for (let i = 0; i < count; i++) order.push((i * 7919) % count);
  const pushed: number[] = [];
  for (const piece of order) {
    pusher.verified(piece);
    if (piece % 3 === 0) pushed.push(pusher.next());
  }
  pushed.push(...drain(pusher));
  assert.deepEqual(pushed, order);
  assert.equal(pusher.queued, 0);
});
