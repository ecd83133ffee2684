/**
 * RingFeed: a ring child's subscription to its ring parent (ring mode: swarm/core/ring-plan.ts).
 * One connection of its own on the parent's agent port: the upgrade and HELLO as for requests
 * (wire-socket.ts) with one SUBSCRIBE (what this host holds) in the same write, then PUSHes in; HAVEs
 * go out for pieces this host gets another way, so the parent does not push them.
 *
 * How bytes move: Node's `onread` lands every read in a buffer named just before it: the decoder's
 * small buffer for frame heads, else the buffer `bufferFor` gave for the piece being pushed. The
 * kernel holds a body's bytes back until much of it is queued (receive-low-water.ts). A piece whose
 * bytes are all in goes to `onPiece` (verify and store); while `pendingMax` pieces wait there the
 * feed stops reading, and TCP holds the parent back.
 *
 * Failures end the feed once, through `onEnd`: a refused upgrade, a GOODBYE, a protocol violation,
 * a PUSH of a piece out of range or of the wrong length, silence while connecting or saying hello
 * (`helloTimeoutMs`), a dropped connection. The feed never reconnects on its own: the scheduler,
 * told by the member, decides what feeds this host next. Silence after the HELLOs is not a fault
 * here (a parent may have nothing new); the scheduler's ring plan cuts a link that stalls.
 */

import type { Socket } from 'node:net';
import type { ClientTls } from '../../auth/transport.js';
import { WeightcastError } from '../../errors.js';
import { ReceiveLowWater } from '../../util/receive-low-water.js';
import {
  FrameDecoder,
  PEER_WIRE_VERSION,
  encodeGoodbye,
  encodeHave,
  encodeSubscribe,
  modelDigestBytes,
  statusError,
  WireStatus,
  type WireEvent,
} from '../wire/peer-frames.js';
import {
  UPGRADE_HEAD_BYTES_MAX,
  openWireSocket,
  readUpgradeAnswer,
  sendUpgradeAndHello,
  warnWireFault,
} from './wire-socket.js';

export interface RingFeedOptions {
  /** The ring parent's base URL. */
  url: string;
  /** The model's manifest digest (hex). */
  model: string;
  pieceCount: number;
  credential?: Uint8Array;
  tls?: ClientTls | undefined;
  /** Longest silence while connecting and saying hello. */
  helloTimeoutMs: number;
  /** What this host holds when it subscribes (a core bitfield). */
  held: () => Uint32Array;
  /** A piece's length in bytes: a PUSH of any other length breaks the feed. */
  pieceLength: (piece: number) => number;
  /** A buffer of exactly `length` bytes for piece `piece`'s pushed bytes (lent until onPiece settles). */
  bufferFor: (piece: number, length: number) => Buffer;
  /** The piece's bytes are all in: verify and store them; a rejection ends the feed with it. */
  onPiece: (piece: number, bytes: Buffer) => Promise<void>;
  /** The feed ended: `error` says why (undefined after close()). Called once. */
  onEnd: (error: WeightcastError | undefined) => void;
  /** Pieces handed to onPiece and not settled, at most; default 4. */
  pendingMax?: number;
  /**
   * A pushed piece's bytes as they land, so they can be passed on before the piece is complete:
   * `start` with its buffer, `progress` with the bytes landed so far, `end` with whether it came whole.
   */
  arriving?: ArrivingListener;
}

/** Watches pushed pieces' bytes as they land (see RingFeedOptions.arriving). */
export interface ArrivingListener {
  start(piece: number, bytes: Buffer): void;
  progress(piece: number, filled: number): void;
  end(piece: number, whole: boolean): void;
}

const PENDING_MAX_DEFAULT = 4;
/** After close()'s GOODBYE, the parent has this long to close before the socket is destroyed. */
const CLOSE_GRACE_MS = 1000;
/** Where bytes go when nothing else wants them (after a failure). */
const SCRATCH_BYTES = 16 * 1024;

export class RingFeed {
  private readonly socket: Socket;
  private readonly decoder = new FrameDecoder('client');
  private readonly lowWater: ReceiveLowWater;
  private readonly model: Uint8Array;
  private upgradeHead: Buffer | undefined = Buffer.allocUnsafe(UPGRADE_HEAD_BYTES_MAX);
  private upgradeFilled = 0;
  private helloTimer: NodeJS.Timeout | undefined;
  private subscribed = false;
  /** The piece whose bytes are arriving, and where they land. */
  private target: { piece: number; bytes: Buffer; filled: number } | undefined;
  private pending = 0;
  private paused = false;
  private ended = false;
  private scratchBuffer: Buffer | undefined;
  /** Pieces pushed whole and handed on. */
  received = 0;

  constructor(private readonly options: RingFeedOptions) {
    this.model = modelDigestBytes(options.model);
    const url = new URL(options.url);
    const onread = { buffer: () => this.nextBuffer(), callback: (count: number) => this.onRead(count) };
    this.socket = openWireSocket(url, onread, options.tls, () => {
      // The SUBSCRIBE goes with the HELLO (the parent reads them in order, and nothing after a HELLO
      // it turns away): the first push comes a round trip sooner than after the parent's HELLO, a
      // round trip through the parent's downlink, which is full of its own feed. HAVEs follow it.
      const subscribe = encodeSubscribe(options.held(), options.pieceCount);
      sendUpgradeAndHello(this.socket, url, this.model, options.credential ?? new Uint8Array(), subscribe);
      this.subscribed = true;
    });
    this.lowWater = new ReceiveLowWater(this.socket);
    this.socket.on('end', () => this.end(disconnected(options.url)));
    this.socket.on('error', (error) => this.end(disconnected(options.url, error)));
    this.socket.on('close', () => this.end(disconnected(options.url)));
    this.helloTimer = setTimeout(
      () =>
        this.end(
          new WeightcastError(
            'ORIGIN_TIMEOUT',
            `the ring parent ${options.url} did not open the feed in ${options.helloTimeoutMs} ms`,
            { retryable: true },
          ),
        ),
      options.helloTimeoutMs,
    );
  }

  /** This host got `piece` another way: the parent should not push it. */
  have(piece: number): void {
    if (this.subscribed && !this.ended) this.socket.write(encodeHave(piece));
  }

  /** Ends the feed (a GOODBYE, then the socket closes); onEnd gets undefined. */
  close(): void {
    if (this.ended) return;
    if (this.subscribed && !this.socket.destroyed) {
      this.socket.end(encodeGoodbye(WireStatus.closing, 'unsubscribed'));
      // The parent closes on the GOODBYE; one that does not is not waited for long.
      setTimeout(() => this.socket.destroy(), CLOSE_GRACE_MS).unref();
    } else {
      this.socket.destroy();
    }
    this.end(undefined);
  }

  private end(error: WeightcastError | undefined): void {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.helloTimer);
    if (this.target !== undefined) this.options.arriving?.end(this.target.piece, false);
    this.target = undefined;
    if (error !== undefined) this.socket.destroy();
    this.options.onEnd(error);
  }

  private get scratch(): Buffer {
    this.scratchBuffer ??= Buffer.allocUnsafe(SCRATCH_BYTES);
    return this.scratchBuffer;
  }

  private nextBuffer(): Uint8Array {
    if (this.ended) return this.scratch;
    if (this.upgradeHead !== undefined) {
      return this.upgradeFilled < this.upgradeHead.length
        ? this.upgradeHead.subarray(this.upgradeFilled)
        : this.scratch;
    }
    if (this.target !== undefined) return this.target.bytes.subarray(this.target.filled);
    return this.decoder.phase === 'failed' ? this.scratch : this.decoder.smallTarget();
  }

  private onRead(count: number): boolean {
    try {
      return this.onLanded(count);
    } catch (error) {
      // A fault of ours while handling the parent's bytes ends this feed (the member and its
      // scheduler find it another), not the process: thrown here, it would be uncaught.
      warnWireFault(`the ring feed from ${this.options.url}`, error);
      this.end(
        new WeightcastError(
          'ORIGIN_IO',
          `the ring feed from ${this.options.url}: an internal error (${error instanceof Error ? error.message : String(error)})`,
          { retryable: true },
          { cause: error },
        ),
      );
      return true;
    }
  }

  private onLanded(count: number): boolean {
    if (this.ended) return true;
    if (this.upgradeHead !== undefined) {
      this.onUpgradeBytes(count);
      return !this.ended;
    }
    let event: WireEvent | undefined;
    const target = this.target;
    if (target !== undefined) {
      target.filled += count;
      this.options.arriving?.progress(target.piece, target.filled);
      event = this.decoder.bodyLanded(count);
    } else {
      event = this.decoder.smallLanded(count);
    }
    if (event !== undefined) this.onEvent(event);
    if (!this.ended)
      this.lowWater.expect(count, this.decoder.phase === 'body' ? this.decoder.bodyRemaining : 0);
    // Pieces waiting for the store: stop reading (TCP then holds the parent back).
    if (this.pending >= (this.options.pendingMax ?? PENDING_MAX_DEFAULT) && !this.ended) {
      this.paused = true;
      return false;
    }
    return true;
  }

  private onUpgradeBytes(count: number): void {
    const head = this.upgradeHead as Buffer;
    if (this.upgradeFilled >= head.length) {
      this.end(protocolError(this.options.url, 'the upgrade answer is too long'));
      return;
    }
    this.upgradeFilled += count;
    const answer = readUpgradeAnswer(head, this.upgradeFilled);
    if (answer.kind === 'partial') return;
    if (answer.kind === 'refused') {
      this.end(
        new WeightcastError(
          'SWARM_PROTOCOL',
          `the ring parent ${this.options.url} does not speak the peer wire (HTTP ${answer.status})`,
        ),
      );
      return;
    }
    this.upgradeHead = undefined;
    // The parent's HELLO (or GOODBYE), and, since our SUBSCRIBE went with our HELLO, maybe the head
    // and first bytes of a push: decoded by copy, the push's bytes put into its buffer here.
    for (const event of this.decoder.push(answer.rest)) {
      if (event.type === 'body') this.onPushBytes(event.bytes);
      else this.onEvent(event);
      if (this.ended) return;
    }
  }

  /** Bytes of the push under way that came with the upgrade's answer. */
  private onPushBytes(bytes: Uint8Array): void {
    const target = this.target;
    if (target === undefined) {
      this.end(protocolError(this.options.url, 'bytes outside a push'));
      return;
    }
    target.bytes.set(bytes, target.filled);
    target.filled += bytes.length;
    this.options.arriving?.progress(target.piece, target.filled);
  }

  private onEvent(event: WireEvent): void {
    switch (event.type) {
      case 'hello':
        if (
          event.hello.version !== PEER_WIRE_VERSION ||
          Buffer.compare(event.hello.model, this.model) !== 0
        ) {
          this.end(protocolError(this.options.url, 'the parent said hello for another model or version'));
          return;
        }
        clearTimeout(this.helloTimer);
        return;
      case 'push':
        this.onPushHead(event.piece, event.length);
        return;
      case 'push-end':
        this.onPushEnd();
        return;
      case 'goodbye':
        this.end(
          statusError(event.status, `the ring parent ${this.options.url} ended the feed (${event.reason})`),
        );
        return;
      case 'error':
        this.end(event.error);
        return;
      default:
        this.end(protocolError(this.options.url, `unexpected ${event.type}`));
    }
  }

  private onPushHead(piece: number, length: number): void {
    if (piece >= this.options.pieceCount) {
      this.end(protocolError(this.options.url, `a push of piece ${piece}, past the last`));
      return;
    }
    const expected = this.options.pieceLength(piece);
    if (length !== expected) {
      this.end(
        protocolError(this.options.url, `a push of ${length} bytes for piece ${piece} of ${expected}`),
      );
      return;
    }
    const bytes = this.options.bufferFor(piece, length);
    this.target = { piece, bytes: bytes.subarray(0, length), filled: 0 };
    this.options.arriving?.start(piece, this.target.bytes);
  }

  private onPushEnd(): void {
    const target = this.target;
    this.target = undefined;
    if (target === undefined) return;
    this.options.arriving?.end(target.piece, true);
    this.received++;
    this.pending++;
    this.options.onPiece(target.piece, target.bytes).then(
      () => {
        this.pending--;
        if (this.paused && !this.ended) {
          this.paused = false;
          this.socket.resume();
        }
      },
      (error: unknown) =>
        this.end(
          error instanceof WeightcastError
            ? error
            : new WeightcastError('IO', `piece ${target.piece} from the ring: ${String(error)}`),
        ),
    );
  }
}

function protocolError(url: string, reason: string): WeightcastError {
  return new WeightcastError('SWARM_PROTOCOL', `the ring parent ${url} broke the peer wire: ${reason}`);
}

function disconnected(url: string, cause?: Error): WeightcastError {
  const reason = cause === undefined ? 'the connection closed' : cause.message;
  return new WeightcastError(
    'ORIGIN_IO',
    `the ring feed from ${url}: ${reason}`,
    { retryable: true },
    { cause },
  );
}
