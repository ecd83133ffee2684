/**
 * The receiving half of one HTTP/1.1 client connection that sends ranged GETs, with no I/O in it:
 * the socket shell (range-socket.ts) asks `buffer()` where the kernel should put the next bytes,
 * reports how many landed with `received(count)`, and acts on the step it gets back.
 *
 * How bytes move: while a response head is awaited, reads land in the reader's own head buffer
 * (at most HEAD_BYTES_MAX bytes), and the head is parsed once its blank line is there. When the
 * caller accepts the head and its Content-Length is the target's length, the body bytes that came
 * with the head are copied into the target once; from then on `buffer()` names the unfilled rest of
 * the target itself, so the kernel writes the body straight into the caller's memory and a read can
 * never run past the body. Every other response leaves the target untouched: a small body of known
 * length is read into the head buffer and dropped so the connection can be reused, and anything
 * else (chunked, length-less, large, `Connection: close`) marks the connection as not reusable.
 *
 * Pipelining: `start` may be called again while a response is under way; the task waits in order
 * and its response is read once the one before it finished. Bytes that arrive with one response's
 * head but lie past its body (a small body, and the next response already on the wire) are kept
 * and become the start of the next response; with no task waiting they are stray bytes and end the
 * connection's reuse, as before. A drained body is read exactly, so no read runs past it.
 */

import type { IncomingHttpHeaders } from 'node:http';
import { assert } from '../errors.js';

/** The largest response head, status line and all header lines, that the reader accepts. */
export const HEAD_BYTES_MAX = 64 * 1024;
/** Unwanted bodies up to this length are read and dropped to keep the connection. */
export const DRAIN_BYTES_MAX = 4 * 1024;
const HEADER_LINES_MAX = 256;
/** 1xx heads (103 Early Hints, a stray 100 Continue) skipped before the final one. */
const INFORMATIONAL_HEADS_MAX = 8;

const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: [^\0\r\n]*)?$/;
const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE_FORBIDDEN = /[\0\r\n]/;

export interface ResponseHead {
  status: number;
  /** Names in lower case; a field sent more than once becomes an array, as undici does. */
  headers: IncomingHttpHeaders;
  /** From Content-Length; undefined when the body is chunked or runs until the connection closes. */
  contentLength: number | undefined;
  /** False for HTTP/1.0, `Connection: close` and any `Transfer-Encoding`. */
  keepAlive: boolean;
}

export type HeadParse =
  | { kind: 'incomplete' }
  | { kind: 'complete'; head: ResponseHead; bytes: number }
  | { kind: 'invalid'; reason: string };

export interface ReceiveTask {
  /** Where an accepted body goes; never empty. */
  target: Uint8Array;
  /** Whether the body under this head is the one the caller asked for. */
  accepts: (head: ResponseHead) => boolean;
}

export interface ReceivedResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** True when the body filled the whole target; false when the target was not touched. */
  bodyFilled: boolean;
}

export type ReadProblem =
  | { kind: 'head-too-large' }
  | { kind: 'malformed'; reason: string }
  | { kind: 'closed-before-head' }
  | { kind: 'closed-in-body'; filled: number; length: number }
  | { kind: 'unexpected-bytes' };

export type ReadStep =
  /** Keep reading; `bodyBytes` of the target were just filled. */
  | { kind: 'waiting'; bodyBytes: number }
  | { kind: 'finished'; response: ReceivedResponse; bodyBytes: number; reusable: boolean }
  /** The connection is unusable from here on. */
  | { kind: 'failed'; problem: ReadProblem };

type Phase = 'idle' | 'head' | 'body' | 'drain' | 'broken';

export class ResponseReader {
  private readonly head = Buffer.alloc(HEAD_BYTES_MAX);
  private headFilled = 0;
  private phase: Phase = 'idle';
  private task: ReceiveTask | undefined;
  /** The response whose body is being filled or drained. */
  private response: ReceivedResponse | undefined;
  private keepAlive = false;
  private filled = 0;
  private drainLeft = 0;
  private bytesThisResponse = 0;
  /** Tasks started behind the one being read (pipelined requests), in order. */
  private readonly waiting: ReceiveTask[] = [];
  /** Head-buffer bytes that arrived past the last finished response, awaiting `proceed`. */
  private carried = false;

  /** Between responses, ready for the next request. */
  get idle(): boolean {
    return this.phase === 'idle';
  }

  /** True once the head is in and its body is being read. */
  get readingBody(): boolean {
    return this.phase === 'body' || this.phase === 'drain';
  }

  /** Bytes of the body being read still to land in its target (0 outside a body). */
  get bodyBytesLeft(): number {
    return this.phase === 'body' ? this.requireTask().target.length - this.filled : 0;
  }

  /** Whether any byte arrived since `start`; a kept-alive socket that died unanswered had none. */
  get heardBack(): boolean {
    return this.bytesThisResponse > 0;
  }

  /** Tasks started and not finished: the response being read and those queued behind it. */
  get outstanding(): number {
    return (this.task === undefined ? 0 : 1) + this.waiting.length;
  }

  /** Reads the response to `task` next, or after the responses already awaited (pipelining). */
  start(task: ReceiveTask): void {
    assert(task.target.length > 0, 'a ranged read has a non-empty target');
    if (this.phase === 'idle') {
      this.begin(task, 0);
      return;
    }
    assert(this.phase !== 'broken', 'a request is sent only on a usable connection');
    this.waiting.push(task);
  }

  /**
   * Drops every task queued behind the current one (their requests were sent, so the connection
   * must not be reused after the current response).
   */
  dropWaiting(): void {
    this.waiting.length = 0;
  }

  /**
   * After a `finished` step: the next response's progress from bytes that came with the last one,
   * or undefined when there are none (then the next read continues it).
   */
  proceed(): ReadStep | undefined {
    if (!this.carried) return undefined;
    this.carried = false;
    return this.parseHeads(0);
  }

  private begin(task: ReceiveTask, carried: number): void {
    this.phase = 'head';
    this.task = task;
    this.headFilled = carried;
    this.filled = 0;
    this.bytesThisResponse = carried;
    this.carried = carried > 0;
  }

  /** Where the next read should land. In the head phase it is never empty: a full head buffer fails. */
  buffer(): Uint8Array {
    if (this.phase === 'body') return this.requireTask().target.subarray(this.filled);
    if (this.phase === 'head') return this.head.subarray(this.headFilled);
    // Exactly the rest of a drained body, so that a read never takes the next response's bytes.
    if (this.phase === 'drain') return this.head.subarray(0, Math.min(this.drainLeft, HEAD_BYTES_MAX));
    return this.head;
  }

  /** `count` bytes landed in the last `buffer()`. */
  received(count: number): ReadStep {
    assert(count > 0, 'a read delivers at least one byte');
    this.bytesThisResponse += count;
    if (this.phase === 'head') return this.receivedHead(count);
    if (this.phase === 'body') return this.receivedBody(count);
    if (this.phase === 'drain') return this.receivedDrain(count);
    return this.fail({ kind: 'unexpected-bytes' });
  }

  /** The peer closed its side. Undefined when no response was under way. */
  ended(): ReadStep | undefined {
    if (this.phase === 'head') return this.fail({ kind: 'closed-before-head' });
    if (this.phase === 'body') {
      return this.fail({
        kind: 'closed-in-body',
        filled: this.filled,
        length: this.requireTask().target.length,
      });
    }
    if (this.phase === 'drain') return this.finish(0, false);
    this.phase = 'broken';
    return undefined;
  }

  private receivedHead(count: number): ReadStep {
    // The blank line may straddle two reads, so the search backs up over its first three bytes;
    // bytes carried over from the last response were never searched.
    const scanFrom = this.carried ? 0 : Math.max(0, this.headFilled - 3);
    this.carried = false;
    this.headFilled += count;
    return this.parseHeads(scanFrom);
  }

  private parseHeads(scanFrom: number): ReadStep {
    let from = scanFrom;
    for (let heads = 0; heads <= INFORMATIONAL_HEADS_MAX; heads++) {
      const parsed = parseResponseHead(this.head.subarray(0, this.headFilled), from);
      if (parsed.kind === 'invalid') return this.fail({ kind: 'malformed', reason: parsed.reason });
      if (parsed.kind === 'incomplete') {
        if (this.headFilled < HEAD_BYTES_MAX) return { kind: 'waiting', bodyBytes: 0 };
        return this.fail({ kind: 'head-too-large' });
      }
      if (!isInformational(parsed.head.status)) return this.startBody(parsed.head, parsed.bytes);
      this.head.copyWithin(0, parsed.bytes, this.headFilled);
      this.headFilled -= parsed.bytes;
      from = 0;
    }
    const reason = `more than ${INFORMATIONAL_HEADS_MAX} informational responses`;
    return this.fail({ kind: 'malformed', reason });
  }

  private startBody(head: ResponseHead, headBytes: number): ReadStep {
    const task = this.requireTask();
    const extra = this.headFilled - headBytes;
    const accepted = task.accepts(head);
    const filling = accepted && head.contentLength === task.target.length;
    this.response = { status: head.status, headers: head.headers, bodyFilled: filling };
    this.keepAlive = head.keepAlive;
    if (filling) return this.fillFromHead(task.target, headBytes, extra);
    const drainable = head.contentLength !== undefined && head.contentLength <= DRAIN_BYTES_MAX;
    if (accepted || !drainable || !head.keepAlive) return this.finish(0, false);
    this.drainLeft = (head.contentLength ?? 0) - extra;
    // Bytes past the drained body: the next response's, if one is awaited.
    if (this.drainLeft <= 0) return this.finish(0, true, headBytes + (head.contentLength ?? 0));
    this.phase = 'drain';
    return { kind: 'waiting', bodyBytes: 0 };
  }

  /** Copies the body bytes that came with the head; the rest will be read into the target directly. */
  private fillFromHead(target: Uint8Array, headBytes: number, extra: number): ReadStep {
    const copied = Math.min(extra, target.length);
    target.set(this.head.subarray(headBytes, headBytes + copied));
    this.filled = copied;
    // Bytes past the body belong to the next response if one is awaited (finish checks).
    if (copied === target.length) return this.finish(copied, this.keepAlive, headBytes + copied);
    this.phase = 'body';
    return { kind: 'waiting', bodyBytes: copied };
  }

  private receivedBody(count: number): ReadStep {
    this.filled += count;
    const length = this.requireTask().target.length;
    assert(this.filled <= length, 'the kernel writes at most the rest of the target');
    if (this.filled < length) return { kind: 'waiting', bodyBytes: count };
    return this.finish(count, this.keepAlive);
  }

  private receivedDrain(count: number): ReadStep {
    this.drainLeft -= count;
    if (this.drainLeft > 0) return { kind: 'waiting', bodyBytes: 0 };
    return this.finish(0, this.keepAlive);
  }

  /**
   * Ends the current response. `end` is where it ended in the head buffer when it was read from
   * there: bytes after it go to the next awaited response, and with none awaited they end reuse
   * (the server does not frame its responses as it says).
   */
  private finish(bodyBytes: number, keepAlive: boolean, end?: number): ReadStep {
    const response = this.response;
    assert(response !== undefined, 'a response finishes only after its head');
    this.task = undefined;
    this.response = undefined;
    const past = end === undefined ? 0 : this.headFilled - end;
    const next = this.waiting.shift();
    const reusable = keepAlive && (past === 0 || next !== undefined);
    if (!reusable) {
      this.phase = 'broken';
      this.waiting.length = 0;
    } else if (next !== undefined) {
      if (past > 0) this.head.copyWithin(0, end as number, this.headFilled);
      this.begin(next, past);
    } else {
      this.phase = 'idle';
    }
    return { kind: 'finished', response, bodyBytes, reusable };
  }

  private fail(problem: ReadProblem): ReadStep {
    this.phase = 'broken';
    this.task = undefined;
    this.response = undefined;
    this.waiting.length = 0;
    this.carried = false;
    return { kind: 'failed', problem };
  }

  private requireTask(): ReceiveTask {
    assert(this.task !== undefined, 'a response is read only for a started task');
    return this.task;
  }
}

/**
 * Parses the head at the start of `bytes` once its terminating blank line is present; `scanFrom` is
 * where the search for that line may start. Strict: CRLF line ends, no folded lines, one consistent
 * Content-Length.
 */
export function parseResponseHead(bytes: Buffer, scanFrom = 0): HeadParse {
  const end = bytes.indexOf(HEAD_END, scanFrom);
  if (end === -1) return { kind: 'incomplete' };
  const lines = bytes.toString('latin1', 0, end).split('\r\n');
  const status = STATUS_LINE.exec(lines[0] ?? '');
  if (status === null) return { kind: 'invalid', reason: 'malformed status line' };
  if (lines.length - 1 > HEADER_LINES_MAX) {
    return { kind: 'invalid', reason: `more than ${HEADER_LINES_MAX} header lines` };
  }
  const fields = new Map<string, string[]>();
  for (let index = 1; index < lines.length; index++) {
    const field = parseField(lines[index] ?? '');
    if (field === undefined) return { kind: 'invalid', reason: `malformed header line ${index}` };
    const values = fields.get(field.name);
    if (values === undefined) fields.set(field.name, [field.value]);
    else values.push(field.value);
  }
  const head = headFromFields(status[1] === '1', Number(status[2]), fields);
  return typeof head === 'string'
    ? { kind: 'invalid', reason: head }
    : { kind: 'complete', head, bytes: end + 4 };
}

export function isFieldName(name: string): boolean {
  return FIELD_NAME.test(name);
}

export function isFieldValue(value: string): boolean {
  return !FIELD_VALUE_FORBIDDEN.test(value);
}

function parseField(line: string): { name: string; value: string } | undefined {
  const colon = line.indexOf(':');
  if (colon <= 0) return undefined;
  const name = line.slice(0, colon);
  const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '');
  if (!isFieldName(name) || !isFieldValue(value)) return undefined;
  return { name: name.toLowerCase(), value };
}

/** The head, or the reason its framing cannot be trusted. */
function headFromFields(
  http11: boolean,
  status: number,
  fields: Map<string, string[]>,
): ResponseHead | string {
  const headers = Object.fromEntries(
    [...fields].map(([name, values]) => [name, values.length === 1 ? values[0] : values]),
  ) as IncomingHttpHeaders;
  const closing = listTokens(fields.get('connection')).includes('close');
  // Transfer-Encoding overrides Content-Length, and a message with both may be a smuggling attempt.
  if (fields.has('transfer-encoding')) return { status, headers, contentLength: undefined, keepAlive: false };
  const contentLength =
    status === 204 || status === 304 ? 0 : parseContentLength(fields.get('content-length'));
  if (contentLength === null) return 'invalid or conflicting Content-Length';
  return { status, headers, contentLength, keepAlive: http11 && !closing };
}

/** Undefined when absent, null when malformed or when repeated values disagree. */
function parseContentLength(values: string[] | undefined): number | undefined | null {
  if (values === undefined) return undefined;
  const parts = values.flatMap((value) => value.split(',')).map((part) => part.trim());
  const first = parts[0] ?? '';
  if (!parts.every((part) => /^\d+$/.test(part) && part === first)) return null;
  const length = Number(first);
  return Number.isSafeInteger(length) ? length : null;
}

function listTokens(values: string[] | undefined): string[] {
  return (values ?? []).flatMap((value) => value.split(',')).map((token) => token.trim().toLowerCase());
}

function isInformational(status: number): boolean {
  // 101 switches protocols, which a ranged GET never asks for; it is returned as a final answer.
  return status >= 100 && status <= 199 && status !== 101;
}
