import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HolderBits, HostBits, LabelGroups } from '../../src/swarm/core/holders.js';

test('holder rows set, test and clear per piece, and survive growth in hosts', () => {
  const holders = new HolderBits(5);
  holders.ensureHosts(10);
  holders.set(2, 3);
  holders.set(2, 9);
  holders.set(4, 0);
  assert.ok(holders.has(2, 3) && holders.has(2, 9) && holders.has(4, 0));
  assert.equal(holders.has(2, 4), false);
  assert.equal(holders.has(3, 3), false);
  assert.equal(holders.has(1, 35), false, 'a host id past the row width holds nothing (not piece 2 host 3)');
  holders.ensureHosts(200);
  assert.ok(holders.rowWords >= 7);
  assert.ok(holders.has(2, 3) && holders.has(2, 9) && holders.has(4, 0), 'rows are re-laid out intact');
  holders.set(2, 150);
  holders.clear(2, 3);
  assert.ok(holders.has(2, 150) && !holders.has(2, 3) && !holders.has(1, 150));
});

test('host bit sets grow on demand', () => {
  const bits = new HostBits();
  bits.add(3);
  bits.add(100);
  assert.ok(bits.has(3) && bits.has(100));
  assert.equal(bits.has(4), false);
  assert.equal(bits.has(5000), false);
  bits.delete(100);
  bits.delete(5000);
  assert.equal(bits.has(100), false);
});

test('label groups list exactly the words where their members are', () => {
  const groups = new LabelGroups();
  groups.add(0, 5);
  groups.add(0, 70);
  groups.add(0, 71);
  groups.add(1, 6);
  assert.deepEqual([...groups.wordIndices(0)].sort(), [0, 2]);
  assert.equal(groups.bits(0)![2], (1 << 6) | (1 << 7));
  groups.delete(0, 70);
  assert.deepEqual([...groups.wordIndices(0)].sort(), [0, 2]);
  groups.delete(0, 71);
  assert.deepEqual([...groups.wordIndices(0)], [0]);
  assert.deepEqual([...groups.wordIndices(7)], []);
  assert.equal(groups.bits(7), undefined);
});

test('host ids must be dense: a holder bitmap past its memory limit is refused', () => {
  const holders = new HolderBits(1 << 22);
  holders.ensureHosts(1000);
  assert.throws(() => holders.ensureHosts(1100), /host ids must be dense/);
  assert.equal(holders.rowWords, 32, 'growth stops at the limit, not past it');
});
