import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newBitfield, setBit } from '../../src/swarm/core/bitfield.js';
import { PRIORITY_PIECES_MAX, PriorityQueues } from '../../src/swarm/core/priority.js';

function queued(queues: PriorityQueues, host: number): number[] {
  return Array.from({ length: queues.length(host) }, (_, i) => queues.at(host, i));
}

test('queues lacking pieces in request order, once each, ignoring held and invalid ones', () => {
  const queues = new PriorityQueues(100);
  const held = newBitfield(100);
  setBit(held, 7);
  assert.equal(queues.add(3, [9, 7, 2, 9, -1, 100, 1.5, 4], held), 3);
  assert.deepEqual(queued(queues, 3), [9, 2, 4]);
  assert.equal(queues.length(0), 0);
  setBit(held, 9);
  setBit(held, 4);
  queues.dropHeldHead(3, held);
  assert.deepEqual(queued(queues, 3), [2, 4], 'only the held head leaves');
  setBit(held, 2);
  queues.dropHeldHead(3, held);
  assert.deepEqual(queued(queues, 3), []);
  assert.equal(queues.add(3, [9], held), 0);
  queues.clear(3);
  assert.equal(queues.length(3), 0);
});

test('a queue holds at most PRIORITY_PIECES_MAX pieces', () => {
  const pieces = PRIORITY_PIECES_MAX + 10;
  const queues = new PriorityQueues(pieces);
  const all = Array.from({ length: pieces }, (_, i) => i);
  assert.equal(queues.add(0, all, newBitfield(pieces)), PRIORITY_PIECES_MAX);
  assert.equal(queues.length(0), PRIORITY_PIECES_MAX);
});
