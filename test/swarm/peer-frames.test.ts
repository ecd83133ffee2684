import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  FRAME_HEAD_BYTES,
  FrameDecoder,
  FrameType,
  HELLO_CREDENTIAL_BYTES_MAX,
  REQUEST_BYTES_MAX,
  WireStatus,
  encodeCancel,
  encodeGoodbye,
  encodeHello,
  encodeRequest,
  encodeResponseHead,
  modelDigestBytes,
  type WireEvent,
  type WireSide,
} from '../../src/swarm/wire/peer-frames.js';

const MODEL = modelDigestBytes('ab'.repeat(32));

/** A small seeded generator (mulberry32): every fuzz case replays from its seed. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function int(next: () => number, below: number): number {
  return Math.floor(next() * below);
}

interface Built {
  bytes: Buffer;
  /** Events a decoder must produce for `bytes`, with body bytes joined per response. */
  expected: unknown[];
}

/** A valid stream from one side: a HELLO, then random frames of that side. */
function validStream(next: () => number, from: WireSide): Built {
  const parts: Buffer[] = [];
  const expected: unknown[] = [];
  const credential = Buffer.alloc(int(next, 40), 7);
  parts.push(encodeHello({ version: 1, model: MODEL, credential }));
  expected.push({ type: 'hello', version: 1, credential: credential.toString('hex') });
  const frames = 1 + int(next, 12);
  for (let i = 0; i < frames; i++) {
    const requestId = int(next, 2 ** 32);
    const pick = int(next, 3);
    if (pick === 0) {
      const reason = 'bye'.repeat(int(next, 5));
      parts.push(encodeGoodbye(WireStatus.closing, reason));
      expected.push({ type: 'goodbye', status: WireStatus.closing, reason });
    } else if (from === 'client' && pick === 1) {
      const request = {
        requestId,
        piece: int(next, 1e6),
        offset: int(next, 1e6),
        length: 1 + int(next, 1e6),
      };
      parts.push(encodeRequest(request));
      expected.push({ type: 'request', request });
    } else if (from === 'client') {
      parts.push(encodeCancel(requestId));
      expected.push({ type: 'cancel', requestId });
    } else if (pick === 1) {
      parts.push(encodeResponseHead(requestId, WireStatus.busy, 0));
      expected.push({ type: 'response', requestId, status: WireStatus.busy, length: 0 });
    } else {
      const body = Buffer.alloc(1 + int(next, 3000));
      for (let b = 0; b < body.length; b++) body[b] = int(next, 256);
      parts.push(encodeResponseHead(requestId, WireStatus.ok, body.length), body);
      expected.push({ type: 'response', requestId, status: WireStatus.ok, length: body.length });
      expected.push({ type: 'body', requestId, hex: body.toString('hex') });
      expected.push({ type: 'response-end', requestId });
    }
  }
  return { bytes: Buffer.concat(parts), expected };
}

/** Events in a comparable form; consecutive body events of one response joined. */
function normalise(events: WireEvent[]): unknown[] {
  const out: unknown[] = [];
  for (const event of events) {
    if (event.type === 'hello') {
      out.push({
        type: 'hello',
        version: event.hello.version,
        credential: Buffer.from(event.hello.credential).toString('hex'),
      });
    } else if (event.type === 'body') {
      const last = out.at(-1) as { type?: string; requestId?: number; hex?: string } | undefined;
      const hex = Buffer.from(event.bytes).toString('hex');
      if (last?.type === 'body' && last.requestId === event.requestId) last.hex += hex;
      else out.push({ type: 'body', requestId: event.requestId, hex });
    } else if (event.type === 'error') {
      out.push({ type: 'error', code: event.error.code });
    } else {
      out.push(event);
    }
  }
  return out;
}

/** Feeds `bytes` in random chunks; never throws (the test fails if it does). */
function decodeChunked(side: WireSide, bytes: Buffer, next: () => number): WireEvent[] {
  const decoder = new FrameDecoder(side);
  const events: WireEvent[] = [];
  let at = 0;
  while (at < bytes.length) {
    const size = 1 + int(next, next() < 0.5 ? 16 : 4096);
    // A fresh copy per chunk: 'body' views must be read before the next push reuses nothing.
    events.push(...decoder.push(Buffer.from(bytes.subarray(at, at + size))));
    at += size;
  }
  return events;
}

/** The zero-copy way a transport feeds it: small reads into its buffer, body bytes landed elsewhere. */
function decodeZeroCopy(side: WireSide, bytes: Buffer, next: () => number): WireEvent[] {
  const decoder = new FrameDecoder(side);
  const events: WireEvent[] = [];
  let at = 0;
  while (at < bytes.length && decoder.phase !== 'failed') {
    let event: WireEvent | undefined;
    if (decoder.phase === 'body') {
      const take = Math.min(decoder.bodyRemaining, 1 + int(next, 2000), bytes.length - at);
      events.push({ type: 'body', requestId: decoder.bodyRequestId, bytes: bytes.subarray(at, at + take) });
      event = decoder.bodyLanded(take);
      at += take;
    } else {
      const target = decoder.smallTarget();
      const take = Math.min(target.length, 1 + int(next, 20), bytes.length - at);
      target.set(bytes.subarray(at, at + take));
      event = decoder.smallLanded(take);
      at += take;
    }
    if (event !== undefined) events.push(event);
  }
  return events;
}

describe('peer wire framing', () => {
  it('decodes random valid streams split at arbitrary boundaries, both ways of feeding', () => {
    for (let seed = 1; seed <= 400; seed++) {
      const next = random(seed);
      const from: WireSide = seed % 2 === 0 ? 'client' : 'server';
      const side: WireSide = from === 'client' ? 'server' : 'client';
      const { bytes, expected } = validStream(next, from);
      assert.deepEqual(normalise(decodeChunked(side, bytes, next)), expected, `seed ${seed}`);
      assert.deepEqual(normalise(decodeZeroCopy(side, bytes, next)), expected, `seed ${seed} (zero-copy)`);
    }
  });

  it('never throws on mutated or random input, and stops after one SWARM_PROTOCOL error', () => {
    for (let seed = 1; seed <= 2000; seed++) {
      const next = random(seed);
      const from: WireSide = seed % 2 === 0 ? 'client' : 'server';
      const side: WireSide = from === 'client' ? 'server' : 'client';
      let bytes: Buffer;
      if (seed % 5 === 0) {
        bytes = Buffer.alloc(1 + int(next, 200));
        for (let b = 0; b < bytes.length; b++) bytes[b] = int(next, 256);
      } else {
        bytes = Buffer.from(validStream(next, from).bytes);
        const flips = 1 + int(next, 4);
        for (let f = 0; f < flips; f++) {
          const at = int(next, Math.min(bytes.length, 200));
          bytes[at] = int(next, 256);
        }
      }
      const events = [...decodeChunked(side, bytes, next), ...decodeZeroCopy(side, bytes, next)];
      const errors = events.filter((event) => event.type === 'error');
      for (const error of errors) {
        if (error.type === 'error') assert.equal(error.error.code, 'SWARM_PROTOCOL', `seed ${seed}`);
      }
      // At most one error per decoder, and nothing after it from that decoder.
      const chunked = decodeChunked(side, bytes, random(seed));
      const index = chunked.findIndex((event) => event.type === 'error');
      if (index !== -1) assert.equal(index, chunked.length - 1, `seed ${seed}`);
    }
  });

  it('waits on truncated frames without emitting them', () => {
    const request = encodeRequest({ requestId: 9, piece: 3, offset: 0, length: 100 });
    const stream = Buffer.concat([
      encodeHello({ version: 1, model: MODEL, credential: new Uint8Array() }),
      request,
    ]);
    for (let cut = 0; cut < stream.length; cut++) {
      const decoder = new FrameDecoder('server');
      const events = decoder.push(stream.subarray(0, cut));
      assert.ok(
        events.every((event) => event.type === 'hello'),
        `cut ${cut}`,
      );
      assert.notEqual(decoder.phase, 'failed');
      const rest = decoder.push(stream.subarray(cut));
      assert.deepEqual(
        [...events, ...rest].map((event) => event.type),
        ['hello', 'request'],
      );
    }
    const body = Buffer.alloc(10, 1);
    const client = new FrameDecoder('client');
    client.push(encodeHello({ version: 1, model: MODEL, credential: new Uint8Array() }));
    const partial = client.push(
      Buffer.concat([encodeResponseHead(4, WireStatus.ok, 10), body.subarray(0, 6)]),
    );
    assert.deepEqual(
      partial.map((event) => event.type),
      ['response', 'body'],
    );
    assert.equal(client.phase, 'body');
    assert.equal(client.bodyRemaining, 4);
  });

  it('refuses what breaks the protocol', () => {
    const hello = encodeHello({ version: 1, model: MODEL, credential: new Uint8Array() });
    const cases: Array<[string, WireSide, Buffer]> = [
      [
        'a request before the hello',
        'server',
        encodeRequest({ requestId: 1, piece: 0, offset: 0, length: 1 }),
      ],
      ['a second hello', 'server', Buffer.concat([hello, hello])],
      ['a response sent to a server', 'server', Buffer.concat([hello, encodeResponseHead(1, 0, 1)])],
      [
        'a request sent to a client',
        'client',
        Buffer.concat([hello, encodeRequest({ requestId: 1, piece: 0, offset: 0, length: 1 })]),
      ],
      ['a bad magic', 'server', Buffer.from(hello).fill(0, FRAME_HEAD_BYTES, FRAME_HEAD_BYTES + 1)],
      [
        'an unknown type',
        'server',
        Buffer.concat([hello, Buffer.from([9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])]),
      ],
      ['a reserved bit', 'server', Buffer.concat([hello, Buffer.from([4, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0])])],
      [
        'a refusal with bytes',
        'client',
        Buffer.concat([hello, Buffer.from([3, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 5])]),
      ],
      ['an empty ok', 'client', Buffer.concat([hello, Buffer.from([3, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0])])],
      [
        'an unknown status',
        'client',
        Buffer.concat([hello, Buffer.from([3, 200, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0])]),
      ],
    ];
    for (const [what, side, bytes] of cases) {
      const events = new FrameDecoder(side).push(bytes);
      const last = events.at(-1);
      assert.equal(last?.type, 'error', what);
      if (last?.type === 'error') assert.equal(last.error.code, 'SWARM_PROTOCOL', what);
    }
  });

  it('checks every length against its limit before using it', () => {
    const hello = encodeHello({ version: 1, model: MODEL, credential: new Uint8Array() });
    const huge = (type: number, status = 0): Buffer => {
      const bytes = Buffer.alloc(FRAME_HEAD_BYTES);
      bytes[0] = type;
      bytes[1] = status;
      bytes.writeUInt32BE(0xffffffff, 8);
      return bytes;
    };
    for (const [side, frame] of [
      ['server', huge(FrameType.hello)],
      ['client', Buffer.concat([hello, huge(FrameType.response)])],
      ['server', Buffer.concat([hello, huge(FrameType.goodbye)])],
      ['server', Buffer.concat([hello, huge(FrameType.request)])],
    ] as Array<[WireSide, Buffer]>) {
      const events = new FrameDecoder(side).push(frame);
      assert.equal(events.at(-1)?.type, 'error');
    }
    const tooLong = Buffer.concat([hello, encodeRequest({ requestId: 1, piece: 0, offset: 0, length: 1 })]);
    tooLong.writeUInt32BE(REQUEST_BYTES_MAX + 1, tooLong.length - 4);
    assert.equal(new FrameDecoder('server').push(tooLong).at(-1)?.type, 'error');
    assert.throws(() =>
      encodeHello({ version: 1, model: MODEL, credential: Buffer.alloc(HELLO_CREDENTIAL_BYTES_MAX + 1) }),
    );
    assert.throws(() => encodeRequest({ requestId: 1, piece: 0, offset: 0, length: 0 }));
    assert.throws(() => encodeResponseHead(1, WireStatus.busy, 3));
  });
});
