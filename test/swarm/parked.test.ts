import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ParkedHosts } from '../../src/swarm/core/parked.js';
import { Random } from '../../src/swarm/core/random.js';

test('parked hosts are found near a parent first: same rack, then same zone, then anywhere', () => {
  const seed = 3;
  const random = new Random(seed);
  const parked = new ParkedHosts();
  // Hosts 0-1 in rack 0 (zone 0), host 2 in rack 1 (zone 0), host 3 in zone 1 without a rack.
  parked.setLabels(0, 0, 0);
  parked.setLabels(1, 0, 0);
  parked.setLabels(2, 1, 0);
  parked.setLabels(3, -1, 1);
  for (const host of [0, 1, 2, 3]) parked.add(host);
  parked.add(3);
  assert.equal(parked.size, 4);
  for (let i = 0; i < 20; i++) assert.ok([0, 1].includes(parked.randomNear(0, 0, random)), `seed ${seed}`);
  parked.delete(0);
  parked.delete(1);
  parked.delete(1);
  for (let i = 0; i < 20; i++)
    assert.equal(parked.randomNear(0, 0, random), 2, `seed ${seed}: same zone next`);
  parked.delete(2);
  assert.equal(parked.randomNear(0, 0, random), 3, 'then anyone');
  assert.equal(parked.randomNear(-1, -1, random), 3);
  assert.deepEqual(parked.list(), [3]);
  assert.ok(parked.has(3) && !parked.has(0));
});

test('relabelling a parked host unparks it, so its old groups never point at it', () => {
  const random = new Random(1);
  const parked = new ParkedHosts();
  parked.setLabels(5, 2, 2);
  parked.add(5);
  parked.setLabels(5, 3, 3);
  assert.equal(parked.size, 0);
  parked.add(5);
  parked.setLabels(6, 2, 2);
  parked.add(6);
  for (let i = 0; i < 10; i++) assert.equal(parked.randomNear(2, 2, random), 6);
});
