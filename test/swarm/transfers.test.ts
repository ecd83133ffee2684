import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TransferTable } from '../../src/swarm/core/transfers.js';

function downloadsOf(table: TransferTable, host: number): number[] {
  const out: number[] = [];
  for (let slot = table.firstDownload(host); slot !== -1; slot = table.nextDownload(slot))
    out.push(table.piece[slot]!);
  return out;
}

function uploadsOf(table: TransferTable, host: number): number[] {
  const out: number[] = [];
  for (let slot = table.firstUpload(host); slot !== -1; slot = table.nextUpload(slot))
    out.push(table.piece[slot]!);
  return out.sort((a, b) => a - b);
}

test('transfers are listed per downloader (oldest first) and per parent', () => {
  const table = new TransferTable(2);
  table.ensureHosts(4);
  const a = table.start(0, 10, 1, false);
  const b = table.start(0, 11, -1, false);
  const c = table.start(0, 12, 1, true);
  const d = table.start(2, 13, 1, false);
  assert.deepEqual(downloadsOf(table, 0), [10, 11, 12]);
  assert.deepEqual(uploadsOf(table, 1), [10, 12, 13]);
  assert.equal(table.downloads[0], 3);
  assert.equal(table.uploads[1], 3);
  assert.equal(table.inFlight, 4);
  assert.ok(table.isHedge(c) && !table.isHedge(a));
  table.finish(b);
  assert.deepEqual(downloadsOf(table, 0), [10, 12]);
  table.finish(a);
  table.finish(d);
  assert.deepEqual(uploadsOf(table, 1), [12]);
  assert.equal(table.inFlight, 1);
});

test('ids of finished transfers go stale even when their slot is reused', () => {
  const table = new TransferTable(1);
  table.ensureHosts(2);
  const slot = table.start(0, 1, 1, false);
  const id = table.idOf(slot);
  assert.equal(table.slotOf(id), slot);
  table.finish(slot);
  assert.equal(table.slotOf(id), -1);
  const again = table.start(0, 2, 1, false);
  assert.equal(again, slot, 'the slot is reused');
  assert.notEqual(table.idOf(again), id);
  assert.equal(table.slotOf(id), -1);
  assert.equal(table.slotOf(-5), -1);
  assert.equal(table.slotOf(1.5), -1);
  assert.equal(table.slotOf(123456789), -1);
  assert.throws(() => table.finish(slot + 1), /invariant/);
});

test('cancellation marks a transfer without ending it', () => {
  const table = new TransferTable(4);
  table.ensureHosts(2);
  const slot = table.start(0, 1, 1, false);
  table.markCancelled(slot);
  assert.ok(table.isCancelled(slot) && table.isActive(slot));
  table.finish(slot);
  const next = table.start(0, 1, 1, false);
  assert.equal(table.isCancelled(next), false);
});

test('an ending transfer leaves the slot counts but stays listed until it finishes', () => {
  const table = new TransferTable(4);
  table.ensureHosts(3);
  const slot = table.start(0, 7, 1, false);
  table.start(0, 8, 2, false);
  table.markEnding(slot);
  assert.ok(table.isEnding(slot) && table.isActive(slot));
  assert.deepEqual([table.downloads[0], table.endingDownloads[0], table.uploads[1]], [1, 1, 0]);
  assert.deepEqual(downloadsOf(table, 0), [7, 8]);
  assert.deepEqual(uploadsOf(table, 1), [7]);
  assert.throws(() => table.markEnding(slot), /invariant/);
  table.finish(slot);
  assert.deepEqual([table.downloads[0], table.endingDownloads[0], table.uploads[1]], [1, 0, 0]);
  assert.deepEqual(uploadsOf(table, 1), []);
  assert.equal(table.inFlight, 1);
});
