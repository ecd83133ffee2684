/**
 * PeerWireClient: one agent's reads of piece bytes from one peer over the peer wire
 * (wire/peer-frames.ts). One persistent connection per peer and model, opened by an HTTP Upgrade on
 * the peer's agent port, so peers keep the URLs the scheduler hands out.
 *
 * How bytes move: the socket is opened with Node's `onread`, so every read lands in a buffer this
 * module names just before it: the frame decoder's small buffer while a frame head is awaited, the
 * unfilled rest of the caller's piece buffer while its response's bytes arrive, or a scratch buffer
 * for the bytes of a response the caller gave up. No chunk objects, and no copies of piece bytes.
 *
 * Requests are pipelined: up to `pipeline` are written ahead; more wait here, in order. A caller that
 * aborts gets its promise rejected at once. If the kernel's next read is already aimed at that
 * caller's buffer (its response is arriving), the connection is destroyed, because the next read
 * cannot be re-aimed, and the requests written behind it go again on a fresh connection; otherwise
 * a CANCEL goes out and whatever the peer still sends for it lands in the scratch buffer.
 *
 * Failures: silence longer than `idleTimeoutMs` while a request is unanswered (or while connecting)
 * fails every request on the connection with ORIGIN_TIMEOUT; a dropped connection fails the
 * response under way with ORIGIN_IO and sends the unanswered ones once more on a fresh connection;
 * a protocol violation fails everything with SWARM_PROTOCOL. A peer that answers the upgrade with
 * anything but 101 does not speak the wire: `refused` turns true and its reads fail with
 * SWARM_PROTOCOL (details.wireRefused), so the caller can use HTTP instead.
 */

import type { Socket } from 'node:net';
import type { ClientTls } from '../../auth/transport.js';
import { WeightcastError, abortError, assert, throwIfAborted } from '../../errors.js';
import { landed, type ReadProgress } from '../../origin/origin.js';
import { ReceiveLowWater } from '../../util/receive-low-water.js';
import {
  FrameDecoder,
  PEER_WIRE_VERSION,
  REQUESTS_IN_FLIGHT_MAX,
  WireStatus,
  encodeCancel,
  encodeRequest,
  modelDigestBytes,
  statusError,
  type WireEvent,
} from '../wire/peer-frames.js';
import {
  UPGRADE_HEAD_BYTES_MAX,
  openWireSocket,
  readUpgradeAnswer,
  sendUpgradeAndHello,
  warnWireFault,
} from './wire-socket.js';

export interface PeerWireClientOptions {
  /** The peer's base URL, `http://host:port` (or `https://`: the wire then runs over TLS). */
  url: string;
  /** The model's manifest digest (hex). */
  model: string;
  /** Longest silence while a request is unanswered, while connecting and while saying hello. */
  idleTimeoutMs: number;
  /** Requests written ahead on the connection. Default 4, at most REQUESTS_IN_FLIGHT_MAX. */
  pipeline?: number;
  /** Sent in the HELLO: the cluster token; empty by default (a cluster without one). */
  credential?: Uint8Array;
  /** For an `https:` peer: the CA to trust and a client certificate to present. */
  tls?: ClientTls | undefined;
}

export interface WireReadOptions {
  signal?: AbortSignal | undefined;
  /** Counts landed bytes as they arrive and notes the first one (see ReadProgress). */
  progress?: ReadProgress | undefined;
}

/** Reads waiting for room on the connection. */
const WAITING_MAX = 4096;
const SCRATCH_BYTES = 64 * 1024;
/** Times a request may be sent again after its connection closed before answering it. */
const RESENDS_MAX = 1;
const PIPELINE_DEFAULT = 4;

interface Entry {
  requestId: number;
  piece: number;
  offset: number;
  target: Uint8Array;
  filled: number;
  progress: ReadProgress | undefined;
  signal: AbortSignal | undefined;
  state: 'waiting' | 'sent' | 'receiving' | 'abandoned';
  resends: number;
  resolve: () => void;
  reject: (error: WeightcastError) => void;
  onAbort: () => void;
}

export class PeerWireClient {
  private readonly options: PeerWireClientOptions;
  private readonly pipeline: number;
  private readonly model: Uint8Array;
  private readonly waiting: Entry[] = [];
  private connection: WireConnection | undefined;
  private nextRequestId = 1;
  private closed = false;
  /** The peer answered the upgrade with something else: it does not speak the wire. */
  refused = false;

  constructor(options: PeerWireClientOptions) {
    const pipeline = options.pipeline ?? PIPELINE_DEFAULT;
    assert(Number.isSafeInteger(pipeline) && pipeline >= 1 && pipeline <= REQUESTS_IN_FLIGHT_MAX, 'pipeline');
    const url = new URL(options.url);
    assert(url.protocol === 'http:' || url.protocol === 'https:', 'the peer wire upgrades agent ports');
    this.options = options;
    this.pipeline = pipeline;
    this.model = modelDigestBytes(options.model);
  }

  /** Fills `target` with bytes [offset, offset + target.length) of `piece`, held verified by the peer. */
  read(piece: number, offset: number, target: Uint8Array, options: WireReadOptions = {}): Promise<void> {
    const what = `piece ${piece} from ${this.options.url}`;
    throwIfAborted(options.signal, what);
    if (this.closed) return Promise.reject(closedError(what));
    if (this.refused) return Promise.reject(refusedError(this.options.url, 0));
    if (this.waiting.length >= WAITING_MAX) {
      return Promise.reject(
        new WeightcastError('LIMIT_EXCEEDED', `${what}: more than ${WAITING_MAX} reads wait for the peer`),
      );
    }
    if (options.progress !== undefined) options.progress.filled = 0;
    if (target.length === 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const entry: Entry = {
        requestId: 0,
        piece,
        offset,
        target,
        filled: 0,
        progress: options.progress,
        signal: options.signal,
        state: 'waiting',
        resends: 0,
        resolve: () => {
          entry.signal?.removeEventListener('abort', entry.onAbort);
          resolve();
        },
        reject: (error) => {
          entry.signal?.removeEventListener('abort', entry.onAbort);
          reject(error);
        },
        onAbort: () => this.abandon(entry, abortError(options.signal, what)),
      };
      options.signal?.addEventListener('abort', entry.onAbort, { once: true });
      this.waiting.push(entry);
      this.pump();
    });
  }

  /** Fails every read with ORIGIN_IO ("closed") and closes the connection. */
  async close(): Promise<void> {
    this.closed = true;
    for (const entry of this.waiting.splice(0)) entry.reject(closedError('a read from the peer'));
    const connection = this.connection;
    this.connection = undefined;
    if (connection !== undefined) {
      connection.fail(closedError('a read from the peer'), false);
      await connection.closed;
    }
  }

  /** Sends waiting reads while the connection has room, opening one if needed. */
  private pump(): void {
    if (this.closed || this.waiting.length === 0) return;
    if (this.connection === undefined || this.connection.broken) {
      this.connection = new WireConnection(this.options, this.model, this);
    }
    const connection = this.connection;
    while (connection.ready && connection.inFlight < this.pipeline && this.waiting.length > 0) {
      const entry = this.waiting.shift() as Entry;
      entry.requestId = this.nextRequestId;
      this.nextRequestId = this.nextRequestId >= 0xffffffff ? 1 : this.nextRequestId + 1;
      connection.send(entry);
    }
  }

  /** The caller gave up on `entry`. */
  private abandon(entry: Entry, error: WeightcastError): void {
    if (entry.state === 'waiting') {
      const index = this.waiting.indexOf(entry);
      if (index !== -1) this.waiting.splice(index, 1);
      entry.reject(error);
      return;
    }
    if (entry.state === 'abandoned') return;
    this.connection?.abandon(entry);
    entry.reject(error);
  }

  // ---- called by the connection ---------------------------------------------------------------------

  /** The connection is ready for requests, or gave some back to send again. */
  connectionReady(requeue: Entry[]): void {
    this.waiting.unshift(...requeue);
    this.pump();
  }

  /**
   * The connection ended; `requeue` are reads it never answered that may go again. One that ended
   * before its HELLO exchange (refused, unreachable, silent) fails the reads waiting for it with
   * `error` instead: retrying at once would spin on a dead peer.
   */
  connectionClosed(connection: WireConnection, requeue: Entry[], error: WeightcastError | undefined): void {
    if (this.connection === connection) this.connection = undefined;
    if (connection.refusedStatus !== 0) this.refused = true;
    if (error !== undefined) {
      for (const entry of [...requeue, ...this.waiting.splice(0)]) entry.reject(error);
      return;
    }
    this.waiting.unshift(...requeue);
    this.pump();
  }
}

/**
 * One socket: the upgrade, the HELLO exchange, then requests out and responses in. It owns the
 * entries written on it until they are answered or failed.
 */
class WireConnection {
  private readonly socket: Socket;
  /** The kernel holds a body's bytes back until this many are queued (receive-low-water.ts). */
  private readonly lowWater: ReceiveLowWater;
  private readonly decoder = new FrameDecoder('client');
  private readonly sent = new Map<number, Entry>();
  /** Where bytes nobody wants go (a cancelled response's); made on first use. */
  private scratchBuffer: Buffer | undefined;
  private upgradeHead: Buffer | undefined = Buffer.allocUnsafe(UPGRADE_HEAD_BYTES_MAX);
  private upgradeFilled = 0;
  /** What the kernel's next read goes into: a small decoder buffer, an entry's target, or scratch. */
  private aimedAt: 'small' | 'scratch' | Entry = 'small';
  private timer: NodeJS.Timeout | undefined;
  private helloDone = false;
  private finished = false;
  /** No more requests go on this connection. */
  broken = false;
  refusedStatus = 0;
  readonly closed: Promise<void>;

  constructor(
    private readonly options: PeerWireClientOptions,
    private readonly model: Uint8Array,
    private readonly client: PeerWireClient,
  ) {
    const url = new URL(options.url);
    const onread = { buffer: () => this.nextBuffer(), callback: (count: number) => this.onRead(count) };
    this.socket = openWireSocket(url, onread, options.tls, () =>
      sendUpgradeAndHello(this.socket, url, this.model, this.options.credential ?? new Uint8Array()),
    );
    this.lowWater = new ReceiveLowWater(this.socket);
    this.armTimer();
    this.socket.on('end', () => this.fail(undefined, true));
    this.socket.on('error', (error) => this.fail(error, true));
    this.closed = new Promise<void>((resolve) => {
      this.socket.once('close', () => {
        this.fail(undefined, true);
        resolve();
      });
    });
  }

  get ready(): boolean {
    return this.helloDone && !this.broken;
  }

  get inFlight(): number {
    return this.sent.size;
  }

  send(entry: Entry): void {
    entry.state = 'sent';
    this.sent.set(entry.requestId, entry);
    this.armTimer();
    this.socket.write(
      encodeRequest({
        requestId: entry.requestId,
        piece: entry.piece,
        offset: entry.offset,
        length: entry.target.length,
      }),
    );
  }

  /** The caller gave `entry` up (its promise is rejected right after this). */
  abandon(entry: Entry): void {
    if (this.sent.get(entry.requestId) !== entry) return;
    if (this.aimedAt === entry) {
      // The next read lands in the caller's buffer and cannot be re-aimed: the connection goes,
      // and the requests behind this one go again on a fresh one.
      this.sent.delete(entry.requestId);
      entry.state = 'abandoned';
      this.fail(undefined, true);
      return;
    }
    entry.state = 'abandoned';
    if (!this.socket.destroyed) this.socket.write(encodeCancel(entry.requestId));
  }

  /**
   * Ends the connection: the response under way fails with `error` (or a disconnect error); the
   * unanswered ones go back to the client to send again when `resend` allows, else fail too.
   */
  fail(error: unknown, resend: boolean): void {
    if (this.finished) return;
    this.finished = true;
    this.broken = true;
    this.socket.destroy();
    clearTimeout(this.timer);
    const requeue: Entry[] = [];
    for (const entry of this.sent.values()) {
      if (entry.state === 'abandoned') continue;
      const unanswered = entry.state === 'sent' && entry.filled === 0;
      if (resend && unanswered && entry.resends < RESENDS_MAX) {
        entry.resends += 1;
        entry.state = 'waiting';
        requeue.push(entry);
      } else {
        entry.reject(asWireError(error, this.options.url, entry));
      }
    }
    this.sent.clear();
    const early = this.helloDone ? undefined : asWireError(error, this.options.url, undefined);
    this.client.connectionClosed(this, requeue, early);
  }

  private get scratch(): Buffer {
    this.scratchBuffer ??= Buffer.allocUnsafe(SCRATCH_BYTES);
    return this.scratchBuffer;
  }

  private nextBuffer(): Uint8Array {
    if (this.upgradeHead !== undefined) {
      this.aimedAt = 'small';
      return this.upgradeFilled < this.upgradeHead.length
        ? this.upgradeHead.subarray(this.upgradeFilled)
        : this.scratch;
    }
    if (this.decoder.phase === 'body') {
      const entry = this.sent.get(this.decoder.bodyRequestId);
      if (entry !== undefined && entry.state === 'receiving') {
        this.aimedAt = entry;
        return entry.target.subarray(entry.filled);
      }
      this.aimedAt = 'scratch';
      return this.scratch.subarray(0, Math.min(SCRATCH_BYTES, this.decoder.bodyRemaining));
    }
    this.aimedAt = 'small';
    return this.decoder.phase === 'failed' ? this.scratch : this.decoder.smallTarget();
  }

  private onRead(count: number): boolean {
    try {
      return this.onLanded(count);
    } catch (error) {
      // A fault of ours while handling the peer's bytes ends this connection (its reads fail and
      // are tried elsewhere), not the process: thrown here, it would be uncaught.
      warnWireFault(`the connection to ${this.options.url}`, error);
      this.fail(error, false);
      return true;
    }
  }

  private onLanded(count: number): boolean {
    if (this.broken) return true;
    this.timer?.refresh();
    if (this.upgradeHead !== undefined) {
      this.onUpgradeBytes(count);
      return true;
    }
    const aimed = this.aimedAt;
    if (aimed === 'small') {
      const event = this.decoder.smallLanded(count);
      if (event !== undefined) this.onEvent(event);
      this.expectNext(count);
      return true;
    }
    if (aimed !== 'scratch') {
      if (aimed.progress !== undefined) {
        if (aimed.progress.firstByteMs === undefined) {
          aimed.progress.firstByteMs = performance.now();
          aimed.progress.onFirstByte?.();
        }
        landed(aimed.progress, count);
      }
      aimed.filled += count;
    }
    const event = this.decoder.bodyLanded(count);
    if (event !== undefined) this.onEvent(event);
    this.expectNext(count);
    return true;
  }

  /** Tells the kernel how many bytes to gather before the next read: the rest of the body, if any. */
  private expectNext(bytesRead: number): void {
    if (!this.broken)
      this.lowWater.expect(bytesRead, this.decoder.phase === 'body' ? this.decoder.bodyRemaining : 0);
  }

  /** Bytes of the upgrade answer: wait for its head, check it, hand what follows to the decoder. */
  private onUpgradeBytes(count: number): void {
    const head = this.upgradeHead as Buffer;
    if (this.upgradeFilled >= head.length) {
      this.fail(protocolError(this.options.url, 'the upgrade answer is too long'), false);
      return;
    }
    this.upgradeFilled += count;
    const answer = readUpgradeAnswer(head, this.upgradeFilled);
    if (answer.kind === 'partial') return;
    if (answer.kind === 'refused') {
      this.refusedStatus = answer.status;
      this.fail(refusedError(this.options.url, this.refusedStatus), false);
      return;
    }
    const rest = answer.rest;
    this.upgradeHead = undefined;
    // Before the HELLO exchange nothing was requested, so all that can follow is the peer's HELLO
    // or GOODBYE: small frames, decoded by copy.
    for (const event of this.decoder.push(rest)) {
      this.onEvent(event);
      if (this.broken) return;
    }
  }

  private onEvent(event: WireEvent): void {
    switch (event.type) {
      case 'hello':
        if (event.hello.version !== PEER_WIRE_VERSION || !sameBytes(event.hello.model, this.model)) {
          this.fail(
            protocolError(this.options.url, 'the peer said hello for another model or version'),
            false,
          );
          return;
        }
        this.helloDone = true;
        this.armTimer();
        this.client.connectionReady([]);
        return;
      case 'response':
        this.onResponse(event.requestId, event.status, event.length);
        return;
      case 'response-end': {
        const entry = this.sent.get(event.requestId);
        this.sent.delete(event.requestId);
        this.armTimer();
        if (entry !== undefined && entry.state === 'receiving') entry.resolve();
        this.client.connectionReady([]);
        return;
      }
      case 'goodbye':
        this.fail(
          statusError(event.status, `the peer ${this.options.url} closed the wire (${event.reason})`),
          false,
        );
        return;
      case 'error':
        this.fail(event.error, false);
        return;
      default:
        // 'body' comes only from push(), used here before any request; 'request' and 'cancel'
        // are refused by a client's decoder.
        this.fail(protocolError(this.options.url, `unexpected ${event.type}`), false);
    }
  }

  private onResponse(requestId: number, status: WireStatus, length: number): void {
    const entry = this.sent.get(requestId);
    if (entry === undefined) {
      this.fail(
        protocolError(this.options.url, `an answer to request ${requestId}, which is not open`),
        false,
      );
      return;
    }
    if (status !== WireStatus.ok) {
      this.sent.delete(requestId);
      this.armTimer();
      if (entry.state !== 'abandoned')
        entry.reject(statusError(status, `piece ${entry.piece} from ${this.options.url}`));
      this.client.connectionReady([]);
      return;
    }
    if (entry.state === 'abandoned') return;
    if (length !== entry.target.length) {
      this.fail(
        protocolError(this.options.url, `${length} bytes for a request of ${entry.target.length}`),
        false,
      );
      return;
    }
    entry.state = 'receiving';
  }

  /** The silence timer runs while anything is awaited from the peer. */
  private armTimer(): void {
    const awaiting = !this.helloDone || this.sent.size > 0;
    if (!awaiting) {
      clearTimeout(this.timer);
      this.timer = undefined;
      this.socket.unref();
      return;
    }
    this.socket.ref();
    if (this.timer !== undefined) return;
    const timeoutMs = this.options.idleTimeoutMs;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.fail(
        new WeightcastError(
          'ORIGIN_TIMEOUT',
          `the peer ${this.options.url} sent nothing for ${timeoutMs} ms`,
          {
            timeout: 'body',
            retryable: true,
          },
        ),
        false,
      );
    }, timeoutMs);
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

function protocolError(url: string, reason: string): WeightcastError {
  return new WeightcastError('SWARM_PROTOCOL', `the peer ${url} broke the peer wire: ${reason}`);
}

function refusedError(url: string, status: number): WeightcastError {
  return new WeightcastError(
    'SWARM_PROTOCOL',
    `the peer ${url} does not speak the peer wire (HTTP ${status})`,
    {
      wireRefused: true,
    },
  );
}

/** Our error for a connection's end: `error` if it is ours, else a disconnect wrapping it. */
function asWireError(error: unknown, url: string, entry: Entry | undefined): WeightcastError {
  if (error instanceof WeightcastError) return error;
  const what =
    entry === undefined
      ? `the peer wire to ${url}`
      : `piece ${entry.piece} from ${url} (${entry.filled} of ${entry.target.length} bytes in)`;
  const reason = error instanceof Error ? error.message : 'the connection closed';
  return new WeightcastError('ORIGIN_IO', `${what}: ${reason}`, { retryable: true }, { cause: error });
}

function closedError(what: string): WeightcastError {
  return new WeightcastError('ORIGIN_IO', `${what}: the peer wire client was closed`, { retryable: false });
}
