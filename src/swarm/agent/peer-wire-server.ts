/**
 * PeerWireServer: the serving side of the peer wire (wire/peer-frames.ts) on an agent's HTTP port.
 * A peer asks for `GET /v1/peer-wire` with `Upgrade: weightcast-peer`; the agent's server hands the
 * socket here, which answers 101, reads the peer's HELLO (which model), answers with its own, and
 * then serves REQUESTs on that connection until either side closes it.
 *
 * How bytes move: each request is answered in turn (bytes on one connection are serial anyway). A
 * range among the runs this agent verified last is lent from memory (`borrow`, RecentPieces: most
 * requests are for a parent's newest pieces); any other is read by a positioned read into a pooled
 * buffer. Either is written after its 12-byte head in one corked write: the kernel copies it from
 * that buffer, JavaScript copies nothing. A buffer is given back only once its write has completed.
 *
 * A connection may instead carry a ring subscription (SUBSCRIBE, then HAVEs; ring-push-session.ts):
 * this agent then pushes the child its pieces on it, and answers no requests there.
 *
 * Limits: upload slots (shared with the HTTP path; a request beyond them is answered BUSY at once),
 * the host's upload throttle, REQUESTS_IN_FLIGHT_MAX requests per connection (more closes it), a
 * number of connections, a deadline for the HELLO, and an idle timeout that also ends a write the
 * peer stopped reading, so a stalled peer cannot hold a slot for long.
 */

import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Throttle } from '../../util/throttle.js';
import { writeDone } from '../../util/write-done.js';
import {
  FrameDecoder,
  PEER_WIRE_UPGRADE,
  PEER_WIRE_VERSION,
  REQUESTS_IN_FLIGHT_MAX,
  WireStatus,
  decodeSubscribed,
  encodeGoodbye,
  encodeHello,
  encodeResponseHead,
  subscribeBytes,
  type PieceRequest,
  type WireEvent,
} from '../wire/peer-frames.js';
import { RingPushSession, type RingSource } from './ring-push-session.js';
import type { UploadSlots } from './upload-slots.js';
import type { Borrowed } from './recent-pieces.js';
import { ASSIGNMENT_BYTES_MAX } from '../wire/protocol.js';
import { warnWireFault } from './wire-socket.js';

/** What the server needs of one model it serves. */
export interface ServedModel {
  readonly pieceCount: number;
  readonly pieceSize: number;
  /** Held and verified. */
  has(piece: number): boolean;
  /**
   * The pieces under bytes [offset, offset + length) from `piece`'s start, or undefined where they
   * run past the piece's file. A request may run on into the next pieces of the file (a transfer
   * unit), up to ASSIGNMENT_BYTES_MAX, if every piece under it is held.
   */
  piecesUnder(piece: number, offset: number, length: number): readonly number[] | undefined;
  /** Reads bytes [offset, offset + target.length) from a held piece's start on into `target`. */
  read(piece: number, offset: number, target: Buffer): Promise<void>;
  /**
   * The same bytes from memory without a copy, when they are among the runs verified last
   * (RecentPieces); released once their write is done.
   */
  borrow?(piece: number, offset: number, length: number): Borrowed | undefined;
  /** Ring mode: what a ring parent needs (ring-push-session.ts); a model without it refuses SUBSCRIBE. */
  ring?: RingSource;
}

export interface PeerWireServerOptions {
  /** The model with this manifest digest (hex), if this agent serves it. */
  model: (hex: string) => ServedModel | undefined;
  uploads: UploadSlots;
  throttle: Throttle;
  /** Fault injection for tests: flip one byte of every piece served. */
  corruptUploads?: boolean;
  /**
   * A connection with no traffic for this long is closed; this also ends a write the peer stopped
   * reading, which holds an upload slot. Default 30 s (members give up on a silent peer after 10).
   */
  idleTimeoutMs?: number;
  /** Time a new connection has to say hello. Default 10 s. */
  helloTimeoutMs?: number;
  /** Connections at once. Default 1024. */
  connectionsMax?: number;
  /**
   * Ring subscriptions at once per model (pushes take no upload slot, so this bounds what
   * subscribers can draw). Default 2: the ring child, and its successor while the ring changes.
   */
  subscriptionsMax?: number;
  /** Whether a HELLO's credential admits the peer (the cluster token); default: everyone. */
  authenticate?: (credential: Uint8Array) => boolean;
}

/** Under a throttle, bytes go out in chunks this large, each paid for before it is written. */
const THROTTLED_CHUNK_BYTES = 256 * 1024;

export class PeerWireServer {
  private readonly sockets = new Set<Socket>();
  /** Ring subscriptions open, by model. */
  private readonly subscriptions = new Map<string, number>();
  private closed = false;

  constructor(private readonly options: PeerWireServerOptions) {}

  /** Ring subscriptions open for the model with this digest (hex): children this agent pushes to. */
  subscribers(modelHex: string): number {
    return this.subscriptions.get(modelHex) ?? 0;
  }

  /** Whether an upgrade request asks for the peer wire. */
  static wants(req: IncomingMessage): boolean {
    return req.headers.upgrade?.trim().toLowerCase() === PEER_WIRE_UPGRADE;
  }

  /** Takes over an upgraded connection (the HTTP server's 'upgrade' event). */
  accept(socket: Socket, head: Buffer): void {
    if (this.closed || this.sockets.size >= (this.options.connectionsMax ?? 1024)) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      socket.on('error', () => undefined);
      return;
    }
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.setNoDelay(true);
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: ${PEER_WIRE_UPGRADE}\r\n\r\n`,
    );
    const connection = new ServerConnection(socket, this.options, this.subscriptions);
    if (head.length > 0) connection.onData(head);
  }

  close(): void {
    this.closed = true;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }
}

class ServerConnection {
  private readonly decoder = new FrameDecoder('server');
  /** Requests received and not yet answered, the one being answered first. */
  private readonly queue: PieceRequest[] = [];
  private model: ServedModel | undefined;
  private modelHex = '';
  private serving = false;
  /** A SUBSCRIBE's bitfield while it arrives, then the subscription it opened. */
  private subscribing: { bytes: Buffer; filled: number } | undefined;
  private push: RingPushSession | undefined;
  private saidGoodbye = false;

  constructor(
    private readonly socket: Socket,
    private readonly options: PeerWireServerOptions,
    private readonly subscriptions: Map<string, number>,
  ) {
    socket.setTimeout(options.helloTimeoutMs ?? 10_000, () => socket.destroy());
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
  }

  onData(chunk: Buffer): void {
    if (this.saidGoodbye) return;
    try {
      for (const event of this.decoder.push(chunk)) {
        this.onEvent(event);
        // Once it said goodbye (a HELLO turned away, a limit), nothing more the caller sent counts,
        // even frames that came in the same packet: no request of a model it has not opened.
        if (this.socket.destroyed || this.saidGoodbye) return;
      }
    } catch (error) {
      // A fault of ours while handling one caller's frames ends that connection, not the agent
      // (thrown here, it would be uncaught in the socket's data handler); it is said, not hidden.
      this.saidGoodbye = true;
      this.socket.destroy();
      warnWireFault('a connection', error);
    }
  }

  private onEvent(event: WireEvent): void {
    switch (event.type) {
      case 'hello': {
        const hex = Buffer.from(event.hello.model).toString('hex');
        if (event.hello.version !== PEER_WIRE_VERSION) {
          this.goodbye(WireStatus.badVersion, `this agent speaks version ${PEER_WIRE_VERSION}`);
          return;
        }
        if (this.options.authenticate?.(event.hello.credential) === false) {
          this.goodbye(WireStatus.unauthorized, 'this agent needs the cluster credential in the HELLO');
          return;
        }
        const model = this.options.model(hex);
        if (model === undefined) {
          this.goodbye(WireStatus.unknownModel, `this agent has not joined model ${hex}`);
          return;
        }
        this.model = model;
        this.modelHex = hex;
        this.socket.setTimeout(this.options.idleTimeoutMs ?? 30_000);
        this.socket.write(
          encodeHello({ version: PEER_WIRE_VERSION, model: event.hello.model, credential: new Uint8Array() }),
        );
        return;
      }
      case 'request':
        if (this.queue.length >= REQUESTS_IN_FLIGHT_MAX) {
          this.goodbye(WireStatus.protocol, `more than ${REQUESTS_IN_FLIGHT_MAX} requests in flight`);
          return;
        }
        if (this.queue.some((queued) => queued.requestId === event.request.requestId)) {
          this.goodbye(WireStatus.protocol, `request ${event.request.requestId} is already open`);
          return;
        }
        this.queue.push(event.request);
        this.serveNext();
        return;
      case 'cancel': {
        // The one being answered (first, while serving) is sent whole; a waiting one is dropped.
        const index = this.queue.findIndex((queued) => queued.requestId === event.requestId);
        if (index < (this.serving ? 1 : 0)) return;
        this.queue.splice(index, 1);
        this.socket.write(encodeResponseHead(event.requestId, WireStatus.cancelled, 0));
        return;
      }
      case 'subscribe':
        this.onSubscribe(event.length);
        return;
      case 'body':
        // Only a SUBSCRIBE has a body on a server's side (its decoder refuses the rest).
        if (this.subscribing === undefined) break;
        this.subscribing.bytes.set(event.bytes, this.subscribing.filled);
        this.subscribing.filled += event.bytes.length;
        return;
      case 'subscribe-end':
        this.startPushing();
        return;
      case 'have':
        this.push?.childHas(event.piece);
        return;
      case 'goodbye':
        this.socket.end();
        return;
      case 'error':
        this.goodbye(WireStatus.protocol, event.error.message);
        return;
      default:
        break;
    }
    this.goodbye(WireStatus.protocol, `unexpected ${event.type}`);
  }

  private onSubscribe(length: number): void {
    const model = this.model as ServedModel;
    if (model.ring === undefined) {
      this.goodbye(WireStatus.badRequest, 'this agent does not push pieces along a ring');
      return;
    }
    if (this.queue.length > 0) {
      this.goodbye(WireStatus.protocol, 'a SUBSCRIBE on a connection with requests open');
      return;
    }
    const open = this.subscriptions.get(this.modelHex) ?? 0;
    const limit = this.options.subscriptionsMax ?? 2;
    if (open >= limit) {
      this.goodbye(WireStatus.busy, `this agent already pushes this model to ${open} subscribers`);
      return;
    }
    const expected = subscribeBytes(model.pieceCount);
    if (length !== expected) {
      this.goodbye(
        WireStatus.badRequest,
        `a SUBSCRIBE of ${length} bytes; this model's bitfield has ${expected}`,
      );
      return;
    }
    this.subscribing = { bytes: Buffer.alloc(length), filled: 0 };
    this.subscriptions.set(this.modelHex, open + 1);
    const hex = this.modelHex;
    this.socket.once('close', () => {
      const left = (this.subscriptions.get(hex) ?? 1) - 1;
      if (left > 0) this.subscriptions.set(hex, left);
      else this.subscriptions.delete(hex);
    });
  }

  private startPushing(): void {
    const model = this.model as ServedModel;
    const childHeld = decodeSubscribed(this.subscribing?.bytes ?? new Uint8Array(), model.pieceCount);
    this.subscribing = undefined;
    if (childHeld === undefined || model.ring === undefined) {
      this.goodbye(WireStatus.badRequest, 'a SUBSCRIBE bitfield with a bit past the last piece');
      return;
    }
    const push = new RingPushSession(this.socket, model, model.ring, childHeld, {
      uploads: this.options.uploads,
      send: (head, bytes) => this.send(head, bytes),
      cutThrough: !this.options.throttle.limited,
      ...(this.options.corruptUploads === true ? { corruptUploads: true } : {}),
    });
    this.push = push;
    // A quiet subscription is healthy (nothing new to push); a push the child stopped reading is not.
    this.socket.removeAllListeners('timeout');
    this.socket.on('timeout', () => {
      if (push.busy) this.socket.destroy();
    });
  }

  private goodbye(status: WireStatus, reason: string): void {
    this.saidGoodbye = true;
    this.queue.length = 0;
    this.socket.end(encodeGoodbye(status, reason));
    // A peer that does not read its goodbye does not keep the socket.
    this.socket.setTimeout(1000, () => this.socket.destroy());
  }

  private serveNext(): void {
    if (this.serving || this.queue.length === 0 || this.socket.destroyed) return;
    this.serving = true;
    const request = this.queue[0] as PieceRequest;
    this.serveOne(request)
      .catch(() => this.socket.destroy())
      .finally(() => {
        if (this.queue[0] === request) this.queue.shift();
        this.serving = false;
        this.serveNext();
      });
  }

  private async serveOne(request: PieceRequest): Promise<void> {
    const model = this.model as ServedModel;
    const { requestId, piece, offset, length } = request;
    const status = rangeStatus(model, piece, offset, length);
    if (status !== WireStatus.ok) {
      this.socket.write(encodeResponseHead(requestId, status, 0));
      return;
    }
    const { uploads } = this.options;
    if (!uploads.tryAcquire()) {
      this.socket.write(encodeResponseHead(requestId, WireStatus.busy, 0));
      return;
    }
    const borrowed = this.options.corruptUploads === true ? undefined : model.borrow?.(piece, offset, length);
    if (borrowed !== undefined) {
      let taken = false;
      try {
        taken = await this.send(encodeResponseHead(requestId, WireStatus.ok, length), borrowed.bytes);
      } finally {
        uploads.release();
        borrowed.release(taken);
      }
      return;
    }
    const pooled = uploads.take(length, model.pieceSize);
    let reusable = false;
    try {
      const bytes = pooled.subarray(0, length);
      await model.read(piece, offset, bytes);
      if (this.options.corruptUploads === true) bytes[length >> 1] = (bytes[length >> 1] ?? 0) ^ 0xff;
      reusable = await this.send(encodeResponseHead(requestId, WireStatus.ok, length), bytes);
    } finally {
      uploads.release();
      // A buffer whose write did not complete may still be referenced by the socket.
      if (reusable) uploads.giveBack(pooled);
    }
  }

  /** Writes a head and its bytes; resolves true once the kernel has taken them, false if the socket went. */
  private async send(head: Buffer, bytes: Buffer): Promise<boolean> {
    const { throttle } = this.options;
    const chunkBytes = throttle.limited ? THROTTLED_CHUNK_BYTES : bytes.length;
    for (let at = 0; at < bytes.length; at += chunkBytes) {
      const chunk = bytes.subarray(at, Math.min(bytes.length, at + chunkBytes));
      await throttle.take(chunk.length);
      if (this.socket.destroyed) return false;
      // The head goes in one write with the first bytes: one syscall, no segment of 12 bytes.
      if (at === 0) {
        this.socket.cork();
        this.socket.write(head);
      }
      const written = writeDone(this.socket, chunk);
      if (at === 0) this.socket.uncork();
      if (!(await written)) return false;
    }
    return true;
  }
}

/**
 * Whether bytes [offset, offset + length) from `piece`'s start may be served: inside the piece, or
 * running on through the next pieces of its file (at most ASSIGNMENT_BYTES_MAX), every one held.
 */
function rangeStatus(model: ServedModel, piece: number, offset: number, length: number): WireStatus {
  if (piece >= model.pieceCount || length > Math.max(model.pieceSize, ASSIGNMENT_BYTES_MAX))
    return WireStatus.badRequest;
  const pieces = model.piecesUnder(piece, offset, length);
  if (pieces === undefined) return WireStatus.badRequest;
  return pieces.every((under) => model.has(under)) ? WireStatus.ok : WireStatus.notHeld;
}
