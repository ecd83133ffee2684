import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  SERDE_JSON_DEPTH_MAX,
  scanArrayElements,
  scanObjectMembers,
  serdeJsonProblem,
} from '../../src/format/json-keys.js';

function members(text: string): Array<[string, string]> {
  JSON.parse(text);
  const open = text.indexOf('{');
  return scanObjectMembers(text, open).map((m) => [m.key, text.slice(m.valueStart, m.valueEnd)]);
}

test('members in text order, duplicates kept, escapes decoded', () => {
  assert.deepEqual(members('{}'), []);
  assert.deepEqual(members(' { } '), []);
  assert.deepEqual(members('{"b":1,"a":2,"b":3}'), [
    ['b', '1'],
    ['a', '2'],
    ['b', '3'],
  ]);
  assert.deepEqual(members('{ "\\u0061" : true , "a\\\\" :null,"q\\"":"x\\"}{[" }'), [
    ['a', 'true'],
    ['a\\', 'null'],
    ['q"', '"x\\"}{["'],
  ]);
  // Integer-like keys, which JS objects reorder, keep their place.
  assert.deepEqual(members('{"2":0,"1":{"x":[1,{"y":"]}"}]},"0":-1.5e3}'), [
    ['2', '0'],
    ['1', '{"x":[1,{"y":"]}"}]}'],
    ['0', '-1.5e3'],
  ]);
});

test('array elements as spans', () => {
  const text = '[ 1 ,"a,b", [2,3] ,{"c":[]}, null ]';
  assert.deepEqual(
    scanArrayElements(text, 0).map(([start, end]) => text.slice(start, end)),
    ['1', '"a,b"', '[2,3]', '{"c":[]}', 'null'],
  );
  assert.deepEqual(scanArrayElements('[ ]', 0), []);
});

/** A deterministic generator (mulberry32) so any failure replays exactly. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TRICKY = ['', '"', '\\', '\\"', '{', '}', '[', ']', ',', ':', ' ', '\n', 'é', '\u{1F600}', 'a'];

function randomString(next: () => number): string {
  let s = '';
  const length = Math.floor(next() * 6);
  for (let i = 0; i < length; i++) s += TRICKY[Math.floor(next() * TRICKY.length)] ?? '';
  return s;
}

function randomValue(next: () => number, depth: number): unknown {
  const kind = Math.floor(next() * (depth > 3 ? 4 : 6));
  if (kind === 0) return randomString(next);
  if (kind === 1) return Math.floor(next() * 2000) - 1000 + (next() < 0.3 ? 0.25 : 0);
  if (kind === 2) return next() < 0.5;
  if (kind === 3) return null;
  const size = Math.floor(next() * 4);
  if (kind === 4) return Array.from({ length: size }, () => randomValue(next, depth + 1));
  return Object.fromEntries(
    Array.from({ length: size }, () => [randomString(next), randomValue(next, depth + 1)]),
  );
}

test('every member span parses back to its value (seeded)', () => {
  const seed = 20240611;
  const next = random(seed);
  for (let round = 0; round < 300; round++) {
    const entries = Array.from({ length: Math.floor(next() * 6) }, (_, i) => [
      `${randomString(next)}#${i}`,
      randomValue(next, 0),
    ]);
    const text = JSON.stringify(Object.fromEntries(entries), null, round % 2 === 0 ? undefined : 2);
    const scanned = scanObjectMembers(text, 0);
    const context = `seed ${seed} round ${round}: ${text}`;
    assert.deepEqual(
      scanned.map((m) => m.key),
      Object.keys(JSON.parse(text) as object),
      context,
    );
    for (const member of scanned) {
      const value: unknown = (JSON.parse(text) as Record<string, unknown>)[member.key];
      assert.deepEqual(JSON.parse(text.slice(member.valueStart, member.valueEnd)), value, context);
    }
  }
});

test('what serde_json refuses that JSON.parse accepts', () => {
  const problem = (text: string, depth = 0): string | undefined => {
    JSON.parse(text);
    return serdeJsonProblem(text, 0, text.length, depth);
  };
  assert.equal(problem('{"a":[1,-2.5e300,"\\ud83d\\ude00",true,null]}'), undefined);
  assert.match(problem('1e309') ?? '', /out of range/);
  assert.match(problem('-1e309') ?? '', /out of range/);
  assert.match(problem('[{"x":"\\ud800"}]') ?? '', /surrogate/);
  assert.match(problem('{"\\udfff":1}') ?? '', /surrogate/);
  assert.equal(problem('['.repeat(SERDE_JSON_DEPTH_MAX) + ']'.repeat(SERDE_JSON_DEPTH_MAX)), undefined);
  assert.match(
    problem('['.repeat(SERDE_JSON_DEPTH_MAX + 1) + ']'.repeat(SERDE_JSON_DEPTH_MAX + 1)) ?? '',
    /deeper/,
  );
  assert.match(problem('[[]]', SERDE_JSON_DEPTH_MAX - 1) ?? '', /deeper/);
});
