import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fluidLowerBoundSeconds } from '../../src/sim/bound.js';
import { FluidNetwork, type Endpoint } from '../../src/sim/network.js';

const host = (up: number, down: number, rack = -1): Endpoint => ({
  uploadBytesPerMs: up,
  downloadBytesPerMs: down,
  rack,
});

function runUntilDone(network: FluidNetwork, tickMs: number, limitMs: number): Map<number, number> {
  const finished = new Map<number, number>();
  for (let now = 0; now < limitMs && network.flowCount > 0; now += tickMs) {
    for (const c of network.advance(now, now + tickMs)) {
      finished.set(c.transferId, c.atMs);
      network.remove(c.transferId);
    }
  }
  return finished;
}

test('a single flow runs at the slower of its two links and finishes at the exact time', () => {
  const network = new FluidNetwork([host(100, 100), host(100, 40)], 0, 0);
  network.add(1, 0, 1, 1000, 0);
  const done = runUntilDone(network, 7, 1000);
  assert.equal(done.get(1), 1000 / 40);
});

test('an upload link is water-filled: a flow capped downstream leaves its share to the others', () => {
  // Sender 0 (upload 90) feeds receiver 1 (download 10) and receiver 2 (download 1000).
  const network = new FluidNetwork([host(90, 0), host(0, 10), host(0, 1000)], 0, 0);
  network.add(1, 0, 1, 100, 0);
  network.add(2, 0, 2, 800, 0);
  const done = runUntilDone(network, 1, 100);
  assert.equal(done.get(1), 10); // 10 bytes/ms to the slow receiver
  assert.equal(done.get(2), 10); // the remaining 80 bytes/ms to the fast one
});

test('flows start after their start time and a download link is shared equally', () => {
  const network = new FluidNetwork([host(100, 0), host(100, 0), host(0, 50)], 0, 0);
  network.add(1, 0, 2, 250, 0);
  network.add(2, 1, 2, 250, 5);
  const done = runUntilDone(network, 1, 100);
  // 0..5 ms: flow 1 alone at 50 (250 bytes done at 5 ms exactly).
  assert.equal(done.get(1), 5);
  assert.equal(done.get(2), 10);
});

test('rack uplinks cap cross-rack flows only', () => {
  const endpoints = [host(100, 100, 0), host(100, 100, 0), host(100, 100, 1)];
  const network = new FluidNetwork(endpoints, 2, 20);
  network.add(1, 0, 1, 1000, 0); // same rack: what the uplink-capped flow leaves, 80/ms, then 100/ms
  network.add(2, 0, 2, 200, 0); // across racks: the uplink's 20/ms
  const done = runUntilDone(network, 1, 1000);
  assert.equal(done.get(2), 10);
  assert.equal(done.get(1), 12);
});

test('the fluid lower bound is the largest of its three terms', () => {
  const base = {
    totalBytes: 1000,
    hosts: 10,
    originUploadBytesPerSecond: 100,
    hostDownloadBytesPerSecond: 100,
    hostUploadBytesPerSecond: 50,
  };
  assert.equal(fluidLowerBoundSeconds(base), (10 * 1000) / (100 + 10 * 50)); // swarm upload
  assert.equal(fluidLowerBoundSeconds({ ...base, originUploadBytesPerSecond: 10 }), 100); // origin
  assert.equal(fluidLowerBoundSeconds({ ...base, hostDownloadBytesPerSecond: 5 }), 200); // download
});
