/**
 * The peer wire's ring frames (SUBSCRIBE, HAVE, PUSH; src/swarm/wire/peer-frames.ts): round trips in
 * random chunks, the bitfield's encoding, the order rules, and mutated streams that must end in one
 * protocol error and never a throw. Every fuzz case names its seed.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { newBitfield, setBit } from '../../src/swarm/core/bitfield.js';
import { Random } from '../../src/swarm/core/random.js';
import {
  FrameDecoder,
  REQUEST_BYTES_MAX,
  SUBSCRIBE_BYTES_MAX,
  decodeSubscribed,
  encodeGoodbye,
  encodeHave,
  encodeHello,
  encodePushHead,
  encodeRequest,
  encodeResponseHead,
  encodeSubscribe,
  modelDigestBytes,
  subscribeBytes,
  WireStatus,
  type WireEvent,
  type WireSide,
} from '../../src/swarm/wire/peer-frames.js';

const MODEL = modelDigestBytes('cd'.repeat(32));
const hello = (): Buffer => encodeHello({ version: 1, model: MODEL, credential: new Uint8Array() });

/** Events with body bytes joined per frame, in a comparable form. */
function decode(side: WireSide, bytes: Buffer, random: Random): unknown[] {
  const decoder = new FrameDecoder(side);
  const out: unknown[] = [];
  for (let at = 0; at < bytes.length;) {
    const size = 1 + random.below(random.below(2) === 0 ? 16 : 5000);
    for (const event of decoder.push(Buffer.from(bytes.subarray(at, at + size)))) add(out, event);
    at += size;
  }
  return out;
}

function add(out: unknown[], event: WireEvent): void {
  if (event.type === 'hello') out.push({ type: 'hello' });
  else if (event.type === 'error') out.push({ type: 'error', code: event.error.code });
  else if (event.type === 'body') {
    const last = out.at(-1) as { type?: string; hex?: string } | undefined;
    const hex = Buffer.from(event.bytes).toString('hex');
    if (last?.type === 'body') last.hex += hex;
    else out.push({ type: 'body', hex });
  } else out.push(event);
}

function randomBits(random: Random, pieces: number): Uint32Array {
  const held = newBitfield(pieces);
  for (let piece = 0; piece < pieces; piece++) if (random.below(3) === 0) setBit(held, piece);
  return held;
}

test('a child’s stream (HELLO, SUBSCRIBE, HAVEs) and a parent’s (HELLO, PUSHes) decode in any chunks', () => {
  for (let seed = 1; seed <= 40; seed++) {
    const random = new Random(seed);
    const pieces = 1 + random.below(3000);
    const held = randomBits(random, pieces);
    const child: Buffer[] = [hello(), encodeSubscribe(held, pieces)];
    const childExpected: unknown[] = [
      { type: 'hello' },
      { type: 'subscribe', length: subscribeBytes(pieces) },
      { type: 'body', hex: encodeSubscribe(held, pieces).subarray(12).toString('hex') },
      { type: 'subscribe-end' },
    ];
    const parent: Buffer[] = [hello()];
    const parentExpected: unknown[] = [{ type: 'hello' }];
    for (let i = random.below(10); i > 0; i--) {
      const piece = random.below(2 ** 32);
      child.push(encodeHave(piece));
      childExpected.push({ type: 'have', piece });
      const body = Buffer.alloc(1 + random.below(4000), random.below(256));
      parent.push(encodePushHead(piece, body.length), body);
      parentExpected.push(
        { type: 'push', piece, length: body.length },
        { type: 'body', hex: body.toString('hex') },
      );
      parentExpected.push({ type: 'push-end', piece });
    }
    child.push(encodeGoodbye(WireStatus.closing, 'done'));
    childExpected.push({ type: 'goodbye', status: WireStatus.closing, reason: 'done' });
    assert.deepEqual(decode('server', Buffer.concat(child), random), childExpected, `seed ${seed}`);
    assert.deepEqual(decode('client', Buffer.concat(parent), random), parentExpected, `seed ${seed}`);
    const decoded = decodeSubscribed(encodeSubscribe(held, pieces).subarray(12), pieces);
    assert.deepEqual(decoded, held, `seed ${seed}: the bitfield round trip`);
  }
});

test('a SUBSCRIBE bitfield of the wrong length or with a spare bit set is refused', () => {
  const held = newBitfield(10);
  setBit(held, 9);
  const bytes = encodeSubscribe(held, 10).subarray(12);
  assert.deepEqual([...bytes], [0, 2]);
  assert.equal(decodeSubscribed(bytes, 9), undefined, 'bit 9 is a spare bit of 9 pieces');
  assert.equal(decodeSubscribed(bytes, 17), undefined, '17 pieces take 3 bytes');
  assert.ok(decodeSubscribed(bytes, 16) !== undefined);
  assert.throws(() => encodeSubscribe(newBitfield(8), SUBSCRIBE_BYTES_MAX * 8 + 1), /too many pieces/);
  assert.throws(() => encodePushHead(1, 0), /a push carries/);
  assert.throws(() => encodePushHead(1, REQUEST_BYTES_MAX + 1), /a push carries/);
  assert.throws(() => encodeHave(-1), /u32/);
});

test('the order rules: nothing but HAVE after SUBSCRIBE, no RESPONSE after a PUSH, and each side’s own frames', () => {
  const cases: Array<[WireSide, Buffer[], RegExp]> = [
    [
      'server',
      [
        hello(),
        encodeSubscribe(newBitfield(8), 8),
        encodeRequest({ requestId: 1, piece: 0, offset: 0, length: 1 }),
      ],
      /after SUBSCRIBE/,
    ],
    [
      'server',
      [hello(), encodeSubscribe(newBitfield(8), 8), encodeSubscribe(newBitfield(8), 8)],
      /after SUBSCRIBE/,
    ],
    [
      'client',
      [hello(), encodePushHead(3, 2), Buffer.alloc(2), encodeResponseHead(1, WireStatus.busy, 0)],
      /RESPONSE on a subscribed/,
    ],
    ['server', [hello(), encodePushHead(3, 2), Buffer.alloc(2)], /not expected from a client/],
    ['client', [hello(), encodeHave(3)], /not expected from a server/],
    ['client', [hello(), encodeSubscribe(newBitfield(8), 8)], /not expected from a server/],
    ['server', [encodeHave(1)], /first frame is not a HELLO/],
  ];
  for (const [side, parts, message] of cases) {
    const events = new FrameDecoder(side).push(Buffer.concat(parts));
    const last = events.at(-1);
    assert.equal(last?.type, 'error', `${side}: ${message}`);
    assert.match((last as { error: Error }).error.message, message);
  }
  const head = Buffer.concat([hello(), encodePushHead(1, 4)]);
  head.writeUInt8(1, hello().length + 1); // the PUSH head's status byte
  const refused = new FrameDecoder('client').push(head);
  assert.equal(refused.at(-1)?.type, 'error');
});

test('mutated ring streams end in at most one protocol error and never throw', () => {
  for (let seed = 100; seed < 400; seed++) {
    const random = new Random(seed);
    const side: WireSide = random.below(2) === 0 ? 'server' : 'client';
    const parts: Buffer[] = [hello()];
    if (side === 'server') {
      parts.push(encodeSubscribe(randomBits(random, 64), 64));
      for (let i = random.below(6); i > 0; i--) parts.push(encodeHave(random.below(100)));
    } else {
      for (let i = random.below(6); i > 0; i--) parts.push(encodePushHead(i, 5), Buffer.alloc(5, i));
    }
    const bytes = Buffer.concat(parts);
    for (let flips = 1 + random.below(4); flips > 0; flips--)
      bytes[random.below(bytes.length)] = random.below(256);
    let events: unknown[] = [];
    assert.doesNotThrow(() => {
      events = decode(side, bytes, random);
    }, `seed ${seed}`);
    const errors = events.filter((event) => (event as { type: string }).type === 'error');
    assert.ok(errors.length <= 1, `seed ${seed}: ${errors.length} errors`);
    if (errors.length === 1) assert.equal(events.at(-1), errors[0], `seed ${seed}: events after the error`);
  }
});
