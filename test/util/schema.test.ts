/**
 * The small checker for outside JSON (src/util/schema.ts): what it accepts, what it refuses and where
 * it says the problem is; objects come back with only their known keys.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as s from '../../src/util/schema.js';

const message = s.object({
  name: s.string({ min: 1, max: 8 }),
  count: s.count(10),
  rate: s.number({ positive: true }),
  kind: s.oneOf(['a', 'b']),
  version: s.literal(1),
  flag: s.optional(s.boolean()),
  items: s.array(s.object({ id: s.count() }), { max: 2 }),
  url: s.optional(s.string({ url: true })),
  hex: s.optional(s.string({ pattern: [/^[0-9a-f]+$/, 'expected hex digits'] })),
  even: s.optional(s.number({ int: true, min: -4, max: 4 })),
});

const good = { name: 'x', count: 3, rate: 0.5, kind: 'a', version: 1, items: [{ id: 0 }] };

function issueOf(value: unknown): string {
  const parsed = s.safeParse(message, value);
  assert.equal(parsed.success, false, JSON.stringify(value));
  return parsed.success ? '' : parsed.issue.message;
}

test('accepts a good message, drops unknown keys, keeps an absent optional key absent', () => {
  const parsed = s.safeParse(message, { ...good, extra: 'dropped', items: [{ id: 1, more: true }] });
  assert.ok(parsed.success);
  assert.deepEqual(parsed.data, { ...good, items: [{ id: 1 }] });
  assert.equal('flag' in parsed.data, false);
  const withOptionals = { ...good, flag: false, url: 'http://127.0.0.1:7100/', hex: 'ab', even: -4 };
  assert.deepEqual(s.safeParse(message, withOptionals), { success: true, data: withOptionals });
});

test('names the first problem and where it is', () => {
  assert.equal(issueOf(null), '(root): expected an object, got null');
  assert.equal(issueOf([]), '(root): expected an object, got an array');
  assert.equal(issueOf({ ...good, name: undefined }), 'name: required');
  assert.equal(issueOf({ ...good, name: '' }), 'name: too short: at least 1 characters');
  assert.equal(issueOf({ ...good, name: 'x'.repeat(9) }), 'name: too long: at most 8 characters');
  assert.equal(issueOf({ ...good, name: 7 }), 'name: expected a string, got number');
  assert.equal(issueOf({ ...good, count: 1.5 }), 'count: expected an integer');
  assert.equal(issueOf({ ...good, count: -1 }), 'count: too small: at least 0');
  assert.equal(issueOf({ ...good, count: 11 }), 'count: too large: at most 10');
  assert.equal(issueOf({ ...good, count: '3' }), 'count: expected a finite number, got string');
  assert.equal(issueOf({ ...good, rate: 0 }), 'rate: expected a number above 0');
  assert.equal(
    issueOf({ ...good, rate: Number.POSITIVE_INFINITY }),
    'rate: expected a finite number, got number',
  );
  assert.equal(issueOf({ ...good, kind: 'c' }), 'kind: expected one of "a", "b"');
  assert.equal(issueOf({ ...good, version: 2 }), 'version: expected 1');
  assert.equal(issueOf({ ...good, flag: 'yes' }), 'flag: expected true or false, got string');
  assert.equal(
    issueOf({ ...good, items: [{ id: 0 }, { id: 1 }, { id: 2 }] }),
    'items: too many items: at most 2',
  );
  assert.equal(
    issueOf({ ...good, items: [{ id: 0 }, { id: 'x' }] }),
    'items.1.id: expected a finite number, got string',
  );
  assert.equal(issueOf({ ...good, items: {} }), 'items: expected an array, got an object');
  assert.equal(issueOf({ ...good, url: 'not a url' }), 'url: expected a URL');
  assert.equal(issueOf({ ...good, hex: 'xyz' }), 'hex: expected hex digits');
  assert.equal(issueOf({ ...good, even: 5 }), 'even: too large: at most 4');
});

test('records check every value and keep __proto__ an ordinary key', () => {
  const map = s.record(s.string());
  const parsed = s.safeParse(map, JSON.parse('{"a":"x","__proto__":"y"}'));
  assert.ok(parsed.success);
  assert.equal(Object.getPrototypeOf(parsed.data), Object.prototype);
  assert.deepEqual(Object.keys(parsed.data).sort(), ['__proto__', 'a']);
  const bad = s.safeParse(map, { a: 1 });
  assert.equal(bad.success ? '' : bad.issue.message, 'a: expected a string, got number');
});

test('a check that is not a schema problem is not swallowed', () => {
  const throws = s.string({
    refine: [
      () => {
        throw new RangeError('a bug');
      },
      'never said',
    ],
  });
  assert.throws(() => s.safeParse(throws, 'x'), RangeError);
});
