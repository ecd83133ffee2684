import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DRAIN_BYTES_MAX,
  HEAD_BYTES_MAX,
  ResponseReader,
  parseResponseHead,
  type ReadStep,
  type ResponseHead,
} from '../../src/origin/response-reader.js';

const BODY = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz');

function head(lines: string[]): Buffer {
  return Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
}

function partial(extraLines: string[] = []): Buffer {
  const lines = [
    'HTTP/1.1 206 Partial Content',
    `Content-Range: bytes 0-${BODY.length - 1}/1000`,
    `Content-Length: ${BODY.length}`,
    ...extraLines,
  ];
  return Buffer.concat([head(lines), BODY]);
}

const acceptPartial = (response: ResponseHead): boolean => response.status === 206;

/** Copies `wire` into the reader's buffers in reads of at most `readBytes`, as the kernel would. */
function feed(reader: ResponseReader, wire: Buffer, readBytes: number): ReadStep[] {
  const steps: ReadStep[] = [];
  let offset = 0;
  for (let reads = 0; offset < wire.length && reads < wire.length; reads++) {
    const buffer = reader.buffer();
    const count = Math.min(readBytes, buffer.length, wire.length - offset);
    buffer.set(wire.subarray(offset, offset + count));
    offset += count;
    steps.push(reader.received(count));
    if (steps.at(-1)?.kind !== 'waiting') break;
  }
  return steps;
}

function bodyBytes(steps: ReadStep[]): number {
  return steps.reduce((sum, step) => sum + (step.kind === 'failed' ? 0 : step.bodyBytes), 0);
}

test('a 206 fills the target exactly however the bytes are split into reads', () => {
  const wire = partial();
  for (let readBytes = 1; readBytes <= wire.length; readBytes++) {
    const reader = new ResponseReader();
    const target = new Uint8Array(BODY.length);
    reader.start({ target, accepts: acceptPartial });
    const steps = feed(reader, wire, readBytes);
    const last = steps.at(-1);
    assert.equal(last?.kind, 'finished', `reads of ${readBytes}`);
    assert.ok(last.kind === 'finished' && last.reusable && last.response.bodyFilled);
    assert.equal(bodyBytes(steps), BODY.length);
    assert.deepEqual(Buffer.from(target), BODY, `reads of ${readBytes}`);
    assert.ok(reader.idle);
  }
});

test('once the head is in, reads go straight into the rest of the target', () => {
  const reader = new ResponseReader();
  const target = new Uint8Array(BODY.length);
  reader.start({ target, accepts: acceptPartial });
  const wire = partial();
  const headLength = wire.length - BODY.length;
  feed(reader, wire.subarray(0, headLength + 4), wire.length);
  const next = reader.buffer();
  assert.equal(next.buffer, target.buffer);
  assert.equal(next.byteOffset, target.byteOffset + 4);
  assert.equal(next.length, BODY.length - 4);
});

test('bytes past the body are not taken into the target and end reuse', () => {
  const reader = new ResponseReader();
  const target = new Uint8Array(BODY.length);
  reader.start({ target, accepts: acceptPartial });
  const [step] = feed(reader, Buffer.concat([partial(), Buffer.from('JUNK')]), 1 << 20);
  assert.ok(step?.kind === 'finished' && step.response.bodyFilled && !step.reusable);
  assert.deepEqual(Buffer.from(target), BODY);
  assert.equal(reader.idle, false);
});

test('bytes while idle are a failure', () => {
  const reader = new ResponseReader();
  reader.buffer().set([0x48]);
  assert.deepEqual(reader.received(1), { kind: 'failed', problem: { kind: 'unexpected-bytes' } });
});

test('a small unwanted body is drained and keeps the connection; the target stays untouched', () => {
  for (const readBytes of [1, 7, 1 << 20]) {
    const reader = new ResponseReader();
    const target = new Uint8Array(8);
    reader.start({ target, accepts: acceptPartial });
    const wire = Buffer.concat([head(['HTTP/1.1 404 Not Found', 'Content-Length: 4']), Buffer.from('404\n')]);
    const last = feed(reader, wire, readBytes).at(-1);
    assert.ok(last?.kind === 'finished' && last.reusable && !last.response.bodyFilled);
    assert.equal(last.response.status, 404);
    assert.deepEqual(target, new Uint8Array(8));
  }
});

test('a large or length-less unwanted body ends the connection at once', () => {
  const heads = [
    ['HTTP/1.1 500 Oops', `Content-Length: ${DRAIN_BYTES_MAX + 1}`],
    ['HTTP/1.1 500 Oops'],
    ['HTTP/1.1 500 Oops', 'Transfer-Encoding: chunked'],
    ['HTTP/1.1 404 Not Found', 'Content-Length: 4', 'Connection: close'],
  ];
  for (const lines of heads) {
    const reader = new ResponseReader();
    reader.start({ target: new Uint8Array(8), accepts: acceptPartial });
    const [step] = feed(reader, head(lines), 1 << 20);
    assert.ok(step?.kind === 'finished' && !step.reusable && !step.response.bodyFilled, lines.join());
  }
});

test('a chunked or length-less range the caller accepts never fills the target', () => {
  const heads = [
    ['HTTP/1.1 206 Partial Content', 'Content-Range: bytes 0-7/100', 'Transfer-Encoding: chunked'],
    [
      'HTTP/1.1 206 Partial Content',
      'Content-Range: bytes 0-7/100',
      'Content-Length: 8',
      'Transfer-Encoding: chunked',
    ],
    ['HTTP/1.1 206 Partial Content', 'Content-Range: bytes 0-7/100'],
  ];
  for (const lines of heads) {
    const reader = new ResponseReader();
    const target = new Uint8Array(8);
    reader.start({ target, accepts: acceptPartial });
    const [step] = feed(
      reader,
      Buffer.concat([head(lines), Buffer.from('8\r\n01234567\r\n0\r\n\r\n')]),
      1 << 20,
    );
    assert.ok(step?.kind === 'finished' && !step.reusable && !step.response.bodyFilled, lines.join());
    assert.deepEqual(target, new Uint8Array(8));
  }
});

test('Connection: close and HTTP/1.0 fill the target but end the connection', () => {
  for (const wire of [
    partial(['Connection: close']),
    Buffer.from(partial().toString('latin1').replace('HTTP/1.1', 'HTTP/1.0'), 'latin1'),
  ]) {
    const reader = new ResponseReader();
    const target = new Uint8Array(BODY.length);
    reader.start({ target, accepts: acceptPartial });
    const [step] = feed(reader, wire, 1 << 20);
    assert.ok(step?.kind === 'finished' && step.response.bodyFilled && !step.reusable);
    assert.deepEqual(Buffer.from(target), BODY);
  }
});

test('informational heads before the answer are skipped', () => {
  const reader = new ResponseReader();
  const target = new Uint8Array(BODY.length);
  reader.start({ target, accepts: acceptPartial });
  const wire = Buffer.concat([head(['HTTP/1.1 103 Early Hints', 'Link: </a>; rel=preload']), partial()]);
  const last = feed(reader, wire, 5).at(-1);
  assert.ok(last?.kind === 'finished' && last.response.status === 206 && last.reusable);
  assert.deepEqual(Buffer.from(target), BODY);
});

test('a head that outgrows the limit fails as too large', () => {
  const reader = new ResponseReader();
  reader.start({ target: new Uint8Array(8), accepts: acceptPartial });
  const filler = Buffer.from(
    `HTTP/1.1 200 OK\r\n${'x-filler: aaaaaaaaaaaaaaaaaaaa\r\n'.repeat(HEAD_BYTES_MAX / 16)}`,
  );
  const last = feed(reader, filler, 4096).at(-1);
  assert.deepEqual(last, { kind: 'failed', problem: { kind: 'head-too-large' } });
});

test('the peer closing mid-way is reported with what was filled', () => {
  const wire = partial();
  const headLength = wire.length - BODY.length;
  const cases: [number, string][] = [
    [0, 'closed-before-head'],
    [10, 'closed-before-head'],
    [headLength + 5, 'closed-in-body'],
  ];
  for (const [sent, expected] of cases) {
    const reader = new ResponseReader();
    reader.start({ target: new Uint8Array(BODY.length), accepts: acceptPartial });
    feed(reader, wire.subarray(0, sent), 3);
    const step = reader.ended();
    assert.equal(step?.kind === 'failed' ? step.problem.kind : step?.kind, expected);
    if (step?.kind === 'failed' && step.problem.kind === 'closed-in-body') {
      assert.deepEqual(step.problem, { kind: 'closed-in-body', filled: 5, length: BODY.length });
    }
    assert.equal(reader.heardBack, sent > 0);
  }
  const idle = new ResponseReader();
  assert.equal(idle.ended(), undefined);
});

test('a close while draining still returns the response, without reuse', () => {
  const reader = new ResponseReader();
  reader.start({ target: new Uint8Array(8), accepts: acceptPartial });
  feed(reader, head(['HTTP/1.1 503 Busy', 'Content-Length: 100', 'Retry-After: 3']), 1 << 20);
  const step = reader.ended();
  assert.ok(step?.kind === 'finished' && !step.reusable);
  assert.equal(step.response.headers['retry-after'], '3');
});

test('parseResponseHead reads fields strictly', () => {
  const parsed = parseResponseHead(
    head(['HTTP/1.1 206 Partial', 'X-Twice: a', 'x-twice: b', 'Content-Length: 5, 5', 'Empty:']),
  );
  assert.ok(parsed.kind === 'complete');
  assert.deepEqual(parsed.head.headers, { 'x-twice': ['a', 'b'], 'content-length': '5, 5', empty: '' });
  assert.equal(parsed.head.contentLength, 5);
  assert.equal(parsed.head.keepAlive, true);

  const noBody = parseResponseHead(head(['HTTP/1.1 304 Not Modified', 'Content-Length: 99']));
  assert.ok(noBody.kind === 'complete' && noBody.head.contentLength === 0);
  assert.equal(parseResponseHead(Buffer.from('HTTP/1.1 200 OK\r\nA: b\r\n')).kind, 'incomplete');

  const invalid = [
    ['HTTP/2 200 OK'],
    ['HTTP/1.1 20 OK'],
    ['http/1.1 200 OK'],
    ['HTTP/1.1 200 OK', ' folded: line'],
    ['HTTP/1.1 200 OK', 'no colon'],
    ['HTTP/1.1 200 OK', 'bad name: x'],
    ['HTTP/1.1 200 OK', 'Content-Length: 5', 'Content-Length: 6'],
    ['HTTP/1.1 200 OK', 'Content-Length: -1'],
    ['HTTP/1.1 200 OK', 'Content-Length: 99999999999999999999'],
  ];
  for (const lines of invalid) assert.equal(parseResponseHead(head(lines)).kind, 'invalid', lines.join('|'));
  const bareLf = Buffer.from('HTTP/1.1 200 OK\r\nA: b\nC: d\r\n\r\n');
  assert.equal(parseResponseHead(bareLf).kind, 'invalid');
});

/** Feeds `wire` in reads of `readBytes`, following each finished response with `proceed` as the shell does. */
function feedPipelined(reader: ResponseReader, wire: Buffer, readBytes: number): ReadStep[] {
  const steps: ReadStep[] = [];
  const take = (step: ReadStep): boolean => {
    steps.push(step);
    for (let carried = 0; step.kind === 'finished' && carried < 16; carried++) {
      const next = reader.proceed();
      if (next === undefined) break;
      steps.push(next);
      step = next;
    }
    return step.kind !== 'failed' && !(step.kind === 'finished' && !step.reusable);
  };
  let offset = 0;
  for (let reads = 0; offset < wire.length && reads < wire.length; reads++) {
    if (reader.idle) break;
    const buffer = reader.buffer();
    const count = Math.min(readBytes, buffer.length, wire.length - offset);
    buffer.set(wire.subarray(offset, offset + count));
    offset += count;
    if (!take(reader.received(count))) break;
  }
  return steps;
}

test('pipelined: two responses read in order into their own targets, however the reads fall', () => {
  const second = Buffer.from('the second body, a little longer than the first');
  const wire = Buffer.concat([
    partial(),
    head(['HTTP/1.1 206 Partial Content', `Content-Length: ${second.length}`]),
    second,
  ]);
  for (const readBytes of [1, 5, 40, 64, 1 << 20]) {
    const reader = new ResponseReader();
    const first = new Uint8Array(BODY.length);
    const next = new Uint8Array(second.length);
    reader.start({ target: first, accepts: acceptPartial });
    reader.start({ target: next, accepts: acceptPartial });
    assert.equal(reader.outstanding, 2);
    const steps = feedPipelined(reader, wire, readBytes);
    const finished = steps.filter((step) => step.kind === 'finished');
    assert.equal(finished.length, 2, `reads of ${readBytes}`);
    assert.ok(
      finished.every((step) => step.kind === 'finished' && step.reusable && step.response.bodyFilled),
    );
    assert.equal(bodyBytes(steps), BODY.length + second.length);
    assert.deepEqual(Buffer.from(first), BODY, `reads of ${readBytes}`);
    assert.deepEqual(Buffer.from(next), second, `reads of ${readBytes}`);
    assert.ok(reader.idle);
    assert.equal(reader.outstanding, 0);
  }
});

test('pipelined: a drained error answer is read exactly, then the next response fills its target', () => {
  const wire = Buffer.concat([
    head(['HTTP/1.1 503 Busy', 'Content-Length: 5']),
    Buffer.from('busy\n'),
    partial(),
  ]);
  for (const readBytes of [1, 3, 1 << 20]) {
    const reader = new ResponseReader();
    const refused = new Uint8Array(BODY.length);
    const target = new Uint8Array(BODY.length);
    reader.start({ target: refused, accepts: acceptPartial });
    reader.start({ target, accepts: acceptPartial });
    const finished = feedPipelined(reader, wire, readBytes).filter((step) => step.kind === 'finished');
    assert.deepEqual(
      finished.map((step) => step.kind === 'finished' && [step.response.status, step.response.bodyFilled]),
      [
        [503, false],
        [206, true],
      ],
      `reads of ${readBytes}`,
    );
    assert.deepEqual(refused, new Uint8Array(BODY.length), 'the refused target is untouched');
    assert.deepEqual(Buffer.from(target), BODY);
  }
});

test('pipelined: requests dropped behind the current one make later bytes stray, ending reuse', () => {
  const reader = new ResponseReader();
  const first = new Uint8Array(BODY.length);
  const dropped = new Uint8Array(BODY.length);
  reader.start({ target: first, accepts: acceptPartial });
  reader.start({ target: dropped, accepts: acceptPartial });
  reader.dropWaiting();
  assert.equal(reader.outstanding, 1);
  const steps = feedPipelined(reader, Buffer.concat([partial(), partial()]), 1 << 20);
  const last = steps.at(-1);
  assert.ok(last?.kind === 'finished' && last.response.bodyFilled && !last.reusable);
  assert.deepEqual(Buffer.from(first), BODY);
  assert.deepEqual(dropped, new Uint8Array(BODY.length), 'nothing lands in a dropped target');
  assert.equal(reader.idle, false);
});
