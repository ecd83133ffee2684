import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  bitfieldWords,
  clearBit,
  collectClearBits,
  hasBit,
  lowestBit,
  newBitfield,
  setBit,
} from '../../src/swarm/core/bitfield.js';

test('set, test and clear bits across word boundaries', () => {
  assert.equal(bitfieldWords(0), 0);
  assert.equal(bitfieldWords(1), 1);
  assert.equal(bitfieldWords(32), 1);
  assert.equal(bitfieldWords(33), 2);
  const bits = newBitfield(100);
  for (const i of [0, 31, 32, 63, 64, 99]) {
    assert.equal(hasBit(bits, i), false);
    setBit(bits, i);
    assert.equal(hasBit(bits, i), true, `bit ${i}`);
  }
  assert.equal(hasBit(bits, 30), false);
  clearBit(bits, 31);
  assert.equal(hasBit(bits, 31), false);
  assert.equal(hasBit(bits, 32), true);
});

test('lowestBit finds the lowest set bit, the sign bit included', () => {
  assert.equal(lowestBit(1), 0);
  assert.equal(lowestBit(0b1000), 3);
  assert.equal(lowestBit(0x80000000 | 0), 31);
  assert.equal(lowestBit(0b1100), 2);
});

test('collectClearBits lists the clear bits below the size, from a start word, up to the output size', () => {
  const bits = newBitfield(70);
  for (let i = 0; i < 70; i++) if (i % 3 !== 0) setBit(bits, i);
  const all = new Int32Array(100);
  const n = collectClearBits(bits, 70, 1, all);
  const expected = Array.from({ length: 70 }, (_, i) => i).filter((i) => i % 3 === 0);
  assert.deepEqual(
    [...all.subarray(0, n)].sort((a, b) => a - b),
    expected,
  );
  assert.equal(all[0], 33, 'starts at word 1');
  const few = new Int32Array(5);
  assert.equal(collectClearBits(bits, 70, 0, few), 5);
  assert.deepEqual([...few], [0, 3, 6, 9, 12]);
});
