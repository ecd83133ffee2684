/**
 * The peer wire's framing: how two agents move piece bytes over one persistent connection, pure (no
 * I/O, no clock). The transport (peer-wire-client.ts, peer-wire-server.ts) feeds bytes in and writes
 * the encoded frames out.
 *
 * Every frame is a fixed 12-byte head, then `payloadLength` bytes (all integers big-endian):
 *
 *   offset 0  u8   type       HELLO 1, REQUEST 2, RESPONSE 3, CANCEL 4, GOODBYE 5, SUBSCRIBE 6,
 *                             HAVE 7, PUSH 8
 *   offset 1  u8   status     RESPONSE and GOODBYE (WireStatus); 0 in the others
 *   offset 2  u16  reserved   0
 *   offset 4  u32  requestId  REQUEST, RESPONSE, CANCEL; the piece in HAVE and PUSH; 0 in the others
 *   offset 8  u32  payloadLength
 *
 * Payloads:
 *   HELLO     magic "WCPW" (u32), version (u16), reserved u16 = 0, the model's manifest digest (32
 *             bytes), then a credential (0 to HELLO_CREDENTIAL_BYTES_MAX bytes: the cluster token,
 *             empty when the cluster has none). The client sends it first; the server answers with
 *             its own HELLO (empty credential) or a GOODBYE saying why not (UNAUTHORIZED: the
 *             credential matches no token the server has).
 *   REQUEST   piece (u32, global index), offset from the piece's start (u32), length (u32): 12
 *             bytes. The range may run on into the next pieces of the same file (a transfer unit).
 *   RESPONSE  with status OK, exactly the bytes asked for (the raw piece bytes); otherwise empty.
 *   CANCEL    empty: the client no longer wants `requestId`. A request the server has not started is
 *             answered CANCELLED; one already being sent is sent whole (the client drops its bytes).
 *   GOODBYE   a UTF-8 reason (at most GOODBYE_REASON_BYTES_MAX bytes); the sender closes next.
 *
 * Ring mode (swarm/core/ring-plan.ts) adds three frames. A ring child opens a connection of its own
 * to its ring parent and, after the HELLOs, sends one SUBSCRIBE; from then on the parent pushes.
 *   SUBSCRIBE the child's bitfield (1 to SUBSCRIBE_BYTES_MAX bytes: piece p is bit p % 8 of byte
 *             p / 8, spare bits 0): the parent pushes what it holds and this lacks, then every piece
 *             it verifies that the child lacks (swarm/core/ring-pusher.ts).
 *   HAVE      empty: the child holds piece `requestId` now (got another way); it is not pushed.
 *   PUSH      piece `requestId`'s bytes, exactly the piece (the child checks the length and the
 *             digest; one wrong byte and it drops the connection and tells the scheduler).
 * A connection that subscribed carries nothing else: no REQUEST from the child, no RESPONSE.
 *
 * Every request gets exactly one RESPONSE; the server may answer pipelined requests in any order.
 * Every length is checked against a limit before anything is done with it, and no buffer is ever
 * sized from a number the peer sent: payloads go into fixed buffers here, or into the buffer the
 * caller gave for the request it made.
 */

import { WeightcastError } from '../../errors.js';

export const PEER_WIRE_MAGIC = 0x57435057; // "WCPW"
export const PEER_WIRE_VERSION = 1;
/** The HTTP Upgrade token an agent's server switches to the peer wire for. */
export const PEER_WIRE_UPGRADE = 'weightcast-peer';
/** Where on an agent's server the upgrade is asked for. */
export const PEER_WIRE_PATH = '/v1/peer-wire';

export const FRAME_HEAD_BYTES = 12;
export const MODEL_DIGEST_BYTES = 32;
const HELLO_FIXED_BYTES = 4 + 2 + 2 + MODEL_DIGEST_BYTES;
export const HELLO_CREDENTIAL_BYTES_MAX = 1024;
export const GOODBYE_REASON_BYTES_MAX = 1024;
const REQUEST_PAYLOAD_BYTES = 12;
/** The longest range one request may ask for (manifests' pieces are at most 16 MiB). */
export const REQUEST_BYTES_MAX = 64 * 1024 * 1024;
/** A SUBSCRIBE's bitfield at most: 8,388,608 pieces. */
export const SUBSCRIBE_BYTES_MAX = 1024 * 1024;
/** Requests a client may have unanswered on one connection; the server closes on more. */
export const REQUESTS_IN_FLIGHT_MAX = 16;
/** Largest payload a decoder keeps itself (HELLO, GOODBYE); RESPONSE bytes go to the caller. */
const SMALL_PAYLOAD_BYTES_MAX = Math.max(
  HELLO_FIXED_BYTES + HELLO_CREDENTIAL_BYTES_MAX,
  GOODBYE_REASON_BYTES_MAX,
);

export const FrameType = {
  hello: 1,
  request: 2,
  response: 3,
  cancel: 4,
  goodbye: 5,
  subscribe: 6,
  have: 7,
  push: 8,
} as const;

export const WireStatus = {
  ok: 0,
  notHeld: 1,
  busy: 2,
  badRequest: 3,
  cancelled: 4,
  unknownModel: 5,
  badVersion: 6,
  unauthorized: 7,
  protocol: 8,
  closing: 9,
} as const;
export type WireStatus = (typeof WireStatus)[keyof typeof WireStatus];
const STATUS_MAX = WireStatus.closing;

export interface Hello {
  version: number;
  /** The manifest digest, 32 bytes. */
  model: Uint8Array;
  credential: Uint8Array;
}

export interface PieceRequest {
  requestId: number;
  piece: number;
  offset: number;
  length: number;
}

export type WireEvent =
  | { type: 'hello'; hello: Hello }
  | { type: 'request'; request: PieceRequest }
  | { type: 'cancel'; requestId: number }
  /** A RESPONSE head: for status OK, `length` body bytes follow (as 'body' events, or landed by the caller). */
  | { type: 'response'; requestId: number; status: WireStatus; length: number }
  /** Response bytes, a view of the pushed chunk (valid until the caller's next push). */
  | { type: 'body'; requestId: number; bytes: Uint8Array }
  /** The response's last byte arrived. */
  | { type: 'response-end'; requestId: number }
  | { type: 'goodbye'; status: WireStatus; reason: string }
  /** A SUBSCRIBE head: `length` bitfield bytes follow as 'body' events (requestId 0), then 'subscribe-end'. */
  | { type: 'subscribe'; length: number }
  | { type: 'subscribe-end' }
  | { type: 'have'; piece: number }
  /** A PUSH head: `length` piece bytes follow (as 'body' events with requestId = piece, or landed). */
  | { type: 'push'; piece: number; length: number }
  | { type: 'push-end'; piece: number }
  /** The input broke the protocol; the decoder takes nothing more. */
  | { type: 'error'; error: WeightcastError };

/**
 * Which side decodes: a server reads HELLO, REQUEST, CANCEL, SUBSCRIBE, HAVE, GOODBYE; a client
 * HELLO, RESPONSE, PUSH, GOODBYE.
 */
export type WireSide = 'server' | 'client';

// ---- encoding --------------------------------------------------------------------------------------

function head(type: number, status: number, requestId: number, payloadLength: number, extra = 0): Buffer {
  const bytes = Buffer.allocUnsafe(FRAME_HEAD_BYTES + extra);
  bytes.writeUInt8(type, 0);
  bytes.writeUInt8(status, 1);
  bytes.writeUInt16BE(0, 2);
  bytes.writeUInt32BE(requestId >>> 0, 4);
  bytes.writeUInt32BE(payloadLength, 8);
  return bytes;
}

export function encodeHello(hello: Hello): Buffer {
  if (hello.model.length !== MODEL_DIGEST_BYTES) throw new RangeError('a model digest is 32 bytes');
  if (hello.credential.length > HELLO_CREDENTIAL_BYTES_MAX) throw new RangeError('credential too long');
  const payload = HELLO_FIXED_BYTES + hello.credential.length;
  const bytes = head(FrameType.hello, 0, 0, payload, payload);
  let at = FRAME_HEAD_BYTES;
  at = bytes.writeUInt32BE(PEER_WIRE_MAGIC, at);
  at = bytes.writeUInt16BE(hello.version, at);
  at = bytes.writeUInt16BE(0, at);
  bytes.set(hello.model, at);
  bytes.set(hello.credential, at + MODEL_DIGEST_BYTES);
  return bytes;
}

export function encodeRequest(request: PieceRequest): Buffer {
  checkU32(request.piece, 'piece');
  checkU32(request.offset, 'offset');
  if (!Number.isInteger(request.length) || request.length < 1 || request.length > REQUEST_BYTES_MAX)
    throw new RangeError(`a request asks for 1 to ${REQUEST_BYTES_MAX} bytes`);
  const bytes = head(FrameType.request, 0, request.requestId, REQUEST_PAYLOAD_BYTES, REQUEST_PAYLOAD_BYTES);
  bytes.writeUInt32BE(request.piece, FRAME_HEAD_BYTES);
  bytes.writeUInt32BE(request.offset, FRAME_HEAD_BYTES + 4);
  bytes.writeUInt32BE(request.length, FRAME_HEAD_BYTES + 8);
  return bytes;
}

/** The head of a RESPONSE; with status OK the sender writes `length` raw bytes right after it. */
export function encodeResponseHead(requestId: number, status: WireStatus, length: number): Buffer {
  if (status !== WireStatus.ok && length !== 0) throw new RangeError('only an OK response has bytes');
  if (length > REQUEST_BYTES_MAX) throw new RangeError('response too long');
  return head(FrameType.response, status, requestId, length);
}

export function encodeCancel(requestId: number): Buffer {
  return head(FrameType.cancel, 0, requestId, 0);
}

/** A SUBSCRIBE carrying `held` (a core bitfield: piece p is bit p % 32 of word p / 32) of `pieceCount` pieces. */
export function encodeSubscribe(held: Uint32Array, pieceCount: number): Buffer {
  const length = subscribeBytes(pieceCount);
  if (length > SUBSCRIBE_BYTES_MAX) throw new RangeError('too many pieces for a SUBSCRIBE');
  if (held.length * 4 < length) throw new RangeError('the bitfield is shorter than its pieces');
  const bytes = head(FrameType.subscribe, 0, 0, length, length);
  bytes.fill(0, FRAME_HEAD_BYTES);
  for (let piece = 0; piece < pieceCount; piece++) {
    if (((held[piece >>> 5]! >>> (piece & 31)) & 1) === 1)
      bytes[FRAME_HEAD_BYTES + (piece >>> 3)]! |= 1 << (piece & 7);
  }
  return bytes;
}

/** The bytes of a SUBSCRIBE's bitfield for `pieceCount` pieces. */
export function subscribeBytes(pieceCount: number): number {
  return Math.ceil(pieceCount / 8);
}

/**
 * A SUBSCRIBE's bitfield bytes as a core bitfield, or undefined when they do not fit `pieceCount`
 * pieces (the wrong length, or a spare bit set).
 */
export function decodeSubscribed(bytes: Uint8Array, pieceCount: number): Uint32Array | undefined {
  if (bytes.length !== subscribeBytes(pieceCount)) return undefined;
  const spare = pieceCount & 7;
  if (spare !== 0 && bytes[bytes.length - 1]! >>> spare !== 0) return undefined;
  const held = new Uint32Array(Math.ceil(pieceCount / 32));
  for (let at = 0; at < bytes.length; at++) {
    const byte = bytes[at]!;
    if (byte !== 0) held[at >>> 2]! |= byte << ((at & 3) * 8);
  }
  return held;
}

export function encodeHave(piece: number): Buffer {
  checkU32(piece, 'piece');
  return head(FrameType.have, 0, piece, 0);
}

/** The head of a PUSH; the sender writes the piece's `length` bytes right after it. */
export function encodePushHead(piece: number, length: number): Buffer {
  checkU32(piece, 'piece');
  if (!Number.isInteger(length) || length < 1 || length > REQUEST_BYTES_MAX)
    throw new RangeError(`a push carries 1 to ${REQUEST_BYTES_MAX} bytes`);
  return head(FrameType.push, 0, piece, length);
}

export function encodeGoodbye(status: WireStatus, reason: string): Buffer {
  let text = Buffer.from(reason, 'utf8');
  if (text.length > GOODBYE_REASON_BYTES_MAX) text = text.subarray(0, GOODBYE_REASON_BYTES_MAX);
  const bytes = head(FrameType.goodbye, status, 0, text.length, text.length);
  bytes.set(text, FRAME_HEAD_BYTES);
  return bytes;
}

function checkU32(value: number, what: string): void {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff)
    throw new RangeError(`${what} is not a u32`);
}

/** The manifest digest (`sha256:<hex>` or bare hex) as the 32 bytes a HELLO carries. */
export function modelDigestBytes(model: string): Uint8Array {
  const hex = model.startsWith('sha256:') ? model.slice('sha256:'.length) : model;
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new RangeError('expected a manifest digest');
  return Buffer.from(hex, 'hex');
}

// ---- decoding --------------------------------------------------------------------------------------

type Phase = 'head' | 'small' | 'body' | 'failed';

/**
 * Turns a byte stream into WireEvents. Fed either way:
 *  - `push(chunk)`: any chunk boundaries; response bytes come out as 'body' views of the chunk;
 *  - zero-copy: while `phase` is 'head' or 'small' the shell reads into `smallTarget()` and calls
 *    `smallLanded(n)`; while it is 'body' it puts the next `bodyRemaining` bytes wherever it likes
 *    (the caller's piece buffer) and calls `bodyLanded(n)`.
 * Malformed input yields one 'error' event (SWARM_PROTOCOL) and the decoder stops; it never throws
 * on input. The first frame must be a HELLO (or a GOODBYE, a refusal) and no other HELLO may follow.
 */
export class FrameDecoder {
  /** Fixed: a frame head or a small payload, never more. */
  private readonly small = Buffer.alloc(FRAME_HEAD_BYTES + SMALL_PAYLOAD_BYTES_MAX);
  private smallFilled = 0;
  private smallWanted = FRAME_HEAD_BYTES;
  private state: Phase = 'head';
  private helloSeen = false;
  /** A SUBSCRIBE came (server side): only HAVE and GOODBYE may follow. */
  private subscribed = false;
  /** A PUSH came (client side): no RESPONSE may follow. */
  private pushSeen = false;
  private frameType = 0;
  private frameStatus = 0;
  private frameRequestId = 0;
  private bodyLeft = 0;
  /** What the body under way belongs to (the frame type whose end event comes after it). */
  private bodyType = 0;

  constructor(private readonly side: WireSide) {}

  get phase(): 'head' | 'body' | 'failed' {
    return this.state === 'small' ? 'head' : this.state;
  }

  /** Response bytes still to come for the current RESPONSE ('body' phase). */
  get bodyRemaining(): number {
    return this.bodyLeft;
  }

  /** The request whose response bytes are arriving, or the piece being pushed ('body' phase). */
  get bodyRequestId(): number {
    return this.frameRequestId;
  }

  /** Whether the body arriving is a PUSH's ('body' phase), not a RESPONSE's. */
  get bodyIsPush(): boolean {
    return this.bodyType === FrameType.push;
  }

  /** Where the next head or small-payload bytes go: exactly as many as the decoder still needs. */
  smallTarget(): Uint8Array {
    return this.small.subarray(this.smallFilled, this.smallWanted);
  }

  /** `count` bytes were written into `smallTarget()`. */
  smallLanded(count: number): WireEvent | undefined {
    if (this.state !== 'head' && this.state !== 'small') return this.fail('bytes arrived in the wrong phase');
    if (count <= 0 || this.smallFilled + count > this.smallWanted) return this.fail('bad landed count');
    this.smallFilled += count;
    if (this.smallFilled < this.smallWanted) return undefined;
    return this.state === 'head' ? this.onHead() : this.onSmallPayload();
  }

  /** `count` response bytes were put where the caller wanted them. */
  bodyLanded(count: number): WireEvent | undefined {
    if (this.state !== 'body' || count <= 0 || count > this.bodyLeft) return this.fail('bad landed count');
    this.bodyLeft -= count;
    if (this.bodyLeft > 0) return undefined;
    return this.endBody();
  }

  /** Decodes a chunk of any size. */
  push(chunk: Uint8Array): WireEvent[] {
    const events: WireEvent[] = [];
    let at = 0;
    while (at < chunk.length) {
      if (this.state === 'failed') break;
      if (this.state === 'body') {
        const take = Math.min(this.bodyLeft, chunk.length - at);
        const requestId = this.frameRequestId;
        events.push({ type: 'body', requestId, bytes: chunk.subarray(at, at + take) });
        at += take;
        const event = this.bodyLanded(take);
        if (event !== undefined) events.push(event);
        continue;
      }
      const target = this.smallTarget();
      const take = Math.min(target.length, chunk.length - at);
      target.set(chunk.subarray(at, at + take));
      at += take;
      const event = this.smallLanded(take);
      if (event !== undefined) events.push(event);
    }
    return events;
  }

  private onHead(): WireEvent | undefined {
    const type = this.small.readUInt8(0);
    const status = this.small.readUInt8(1);
    const reserved = this.small.readUInt16BE(2);
    const requestId = this.small.readUInt32BE(4);
    const length = this.small.readUInt32BE(8);
    if (reserved !== 0) return this.fail('a reserved field is not zero');
    if (!this.allowed(type)) return this.fail(`frame type ${type} is not expected from a ${this.peerName()}`);
    if (!this.helloSeen && type !== FrameType.hello && type !== FrameType.goodbye)
      return this.fail('the first frame is not a HELLO');
    if (this.subscribed && type !== FrameType.have && type !== FrameType.goodbye)
      return this.fail(`a frame of type ${type} after SUBSCRIBE`);
    if (this.pushSeen && type === FrameType.response)
      return this.fail('a RESPONSE on a subscribed connection');
    if (this.helloSeen && type === FrameType.hello) return this.fail('a second HELLO');
    if (status > STATUS_MAX) return this.fail(`unknown status ${status}`);
    this.frameType = type;
    this.frameStatus = status;
    this.frameRequestId = requestId;
    switch (type) {
      case FrameType.hello:
        if (status !== 0 || requestId !== 0) return this.fail('a HELLO with a status or request id');
        if (length < HELLO_FIXED_BYTES || length > HELLO_FIXED_BYTES + HELLO_CREDENTIAL_BYTES_MAX)
          return this.fail(`a HELLO of ${length} bytes`);
        return this.expectSmall(length);
      case FrameType.request:
        if (status !== 0) return this.fail('a REQUEST with a status');
        if (length !== REQUEST_PAYLOAD_BYTES) return this.fail(`a REQUEST of ${length} bytes`);
        return this.expectSmall(length);
      case FrameType.cancel:
        if (status !== 0 || length !== 0) return this.fail('a CANCEL with a status or payload');
        return this.nextHead({ type: 'cancel', requestId });
      case FrameType.subscribe:
        if (status !== 0 || requestId !== 0) return this.fail('a SUBSCRIBE with a status or request id');
        if (length < 1 || length > SUBSCRIBE_BYTES_MAX) return this.fail(`a SUBSCRIBE of ${length} bytes`);
        this.subscribed = true;
        return this.expectBody(FrameType.subscribe, length, { type: 'subscribe', length });
      case FrameType.have:
        if (status !== 0 || length !== 0) return this.fail('a HAVE with a status or payload');
        return this.nextHead({ type: 'have', piece: requestId });
      case FrameType.push:
        if (status !== 0) return this.fail('a PUSH with a status');
        if (length < 1 || length > REQUEST_BYTES_MAX) return this.fail(`a PUSH of ${length} bytes`);
        this.pushSeen = true;
        return this.expectBody(FrameType.push, length, { type: 'push', piece: requestId, length });
      case FrameType.goodbye:
        if (requestId !== 0) return this.fail('a GOODBYE with a request id');
        if (length > GOODBYE_REASON_BYTES_MAX) return this.fail(`a GOODBYE of ${length} bytes`);
        if (length === 0) return this.nextHead({ type: 'goodbye', status: status as WireStatus, reason: '' });
        return this.expectSmall(length);
      default: {
        // RESPONSE
        if (status !== WireStatus.ok) {
          if (length !== 0) return this.fail('a refusal with a payload');
          return this.nextHead({ type: 'response', requestId, status: status as WireStatus, length: 0 });
        }
        // Requests ask for at least one byte, so an OK answer carries at least one.
        if (length < 1 || length > REQUEST_BYTES_MAX) return this.fail(`a RESPONSE of ${length} bytes`);
        return this.expectBody(FrameType.response, length, {
          type: 'response',
          requestId,
          status: WireStatus.ok,
          length,
        });
      }
    }
  }

  private allowed(type: number): boolean {
    if (type === FrameType.hello || type === FrameType.goodbye) return true;
    if (this.side === 'server')
      return (
        type === FrameType.request ||
        type === FrameType.cancel ||
        type === FrameType.subscribe ||
        type === FrameType.have
      );
    return type === FrameType.response || type === FrameType.push;
  }

  /** The head announced `length` body bytes of frame `type`: its event now, the bytes next. */
  private expectBody(type: number, length: number, event: WireEvent): WireEvent {
    this.state = 'body';
    this.bodyType = type;
    this.bodyLeft = length;
    return event;
  }

  private peerName(): string {
    return this.side === 'server' ? 'client' : 'server';
  }

  /** Waits for `length` (at least 1) payload bytes in the small buffer. */
  private expectSmall(length: number): undefined {
    this.state = 'small';
    this.smallWanted = FRAME_HEAD_BYTES + length;
    return undefined;
  }

  private onSmallPayload(): WireEvent {
    const payload = this.small.subarray(FRAME_HEAD_BYTES, this.smallWanted);
    const type = this.frameType;
    if (type === FrameType.hello) {
      const magic = payload.readUInt32BE(0);
      if (magic !== PEER_WIRE_MAGIC) return this.fail('a HELLO without the protocol magic');
      if (payload.readUInt16BE(6) !== 0) return this.fail('a reserved field is not zero');
      this.helloSeen = true;
      const hello: Hello = {
        version: payload.readUInt16BE(4),
        // Copies (at most ~1 KiB): the small buffer is reused by the next frame.
        model: new Uint8Array(payload.subarray(8, 8 + MODEL_DIGEST_BYTES)),
        credential: new Uint8Array(payload.subarray(8 + MODEL_DIGEST_BYTES)),
      };
      return this.nextHead({ type: 'hello', hello });
    }
    if (type === FrameType.request) {
      const request: PieceRequest = {
        requestId: this.frameRequestId,
        piece: payload.readUInt32BE(0),
        offset: payload.readUInt32BE(4),
        length: payload.readUInt32BE(8),
      };
      if (request.length < 1 || request.length > REQUEST_BYTES_MAX)
        return this.fail(`a REQUEST for ${request.length} bytes`);
      return this.nextHead({ type: 'request', request });
    }
    // GOODBYE: the reason is text for logs; invalid UTF-8 becomes replacement characters.
    const reason = payload.toString('utf8');
    return this.nextHead({ type: 'goodbye', status: this.frameStatus as WireStatus, reason });
  }

  private endBody(): WireEvent {
    if (this.bodyType === FrameType.subscribe) return this.nextHead({ type: 'subscribe-end' });
    if (this.bodyType === FrameType.push)
      return this.nextHead({ type: 'push-end', piece: this.frameRequestId });
    return this.nextHead({ type: 'response-end', requestId: this.frameRequestId });
  }

  private nextHead(event: WireEvent): WireEvent {
    this.resetHead();
    return event;
  }

  private resetHead(): void {
    this.state = 'head';
    this.smallFilled = 0;
    this.smallWanted = FRAME_HEAD_BYTES;
    this.bodyLeft = 0;
  }

  private fail(reason: string): WireEvent {
    this.state = 'failed';
    this.bodyLeft = 0;
    return { type: 'error', error: new WeightcastError('SWARM_PROTOCOL', `peer wire: ${reason}`) };
  }
}

/** What a refusal status means as an error of ours. */
export function statusError(status: WireStatus, what: string): WeightcastError {
  switch (status) {
    case WireStatus.notHeld:
      return new WeightcastError('SWARM_PIECE_NOT_HELD', `${what}: the peer does not hold it`);
    case WireStatus.busy:
      return new WeightcastError('SWARM_BUSY', `${what}: the peer's upload slots are busy`);
    case WireStatus.cancelled:
      return new WeightcastError('ABORTED', `${what} was cancelled`);
    case WireStatus.unknownModel:
      return new WeightcastError('SWARM_UNKNOWN_MODEL', `${what}: the peer has not joined this model`);
    case WireStatus.unauthorized:
      return new WeightcastError('UNAUTHORIZED', `${what}: the peer did not accept our cluster credential`);
    default:
      return new WeightcastError('SWARM_PROTOCOL', `${what}: the peer answered status ${status}`);
  }
}
