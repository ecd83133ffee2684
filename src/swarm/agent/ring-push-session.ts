/**
 * A ring parent's side of one subscription (ring mode: swarm/core/ring-plan.ts): after its child's
 * SUBSCRIBE on a peer-wire connection, this pushes the child, one PUSH at a time, every piece the
 * pure RingPusher says: what this agent holds and the child lacks, then each piece it verifies.
 *
 * How bytes move: as for a RESPONSE (peer-wire-server.ts), a piece among the runs verified last is
 * lent from memory, any other is read into a pooled buffer, and the 12-byte head goes out in one
 * corked write with it, under the host's upload throttle. Pushes take no upload slot: the scheduler
 * counts a ring's stream apart from the transfers it plans.
 *
 * Limits: one push in flight (the next is read once the kernel took the last); the connection's idle
 * timeout ends a push the child stopped reading, but not a quiet connection with nothing to push (a
 * parent waiting for its next piece is healthy). Closing the socket ends the subscription.
 */

import type { Socket } from 'node:net';
import { RingPusher } from '../core/ring-pusher.js';
import { encodePushHead } from '../wire/peer-frames.js';
import { writeDone } from '../../util/write-done.js';
import type { RingArrivingListener } from './member.js';
import type { ServedModel } from './peer-wire-server.js';
import type { UploadSlots } from './upload-slots.js';

/** What a served model must also offer for this agent to push it along a ring. */
export interface RingSource {
  /** A copy of the held pieces' bitfield (a core bitfield: piece p is bit p % 32 of word p / 32). */
  heldBitfield(): Uint32Array;
  /** Calls `listener` with each piece this agent verifies from now on; returns the unsubscribe. */
  watchVerified(listener: (piece: number) => void): () => void;
  /** The piece's length in bytes (the last piece of a file may be short). */
  pieceLength(piece: number): number;
  /** Pieces pushed to this agent, as their bytes land (cut-through); returns the unsubscribe. */
  watchArriving?(listener: RingArrivingListener): () => void;
}

export interface PushSessionOptions {
  uploads: UploadSlots;
  /** Writes a head and its bytes; resolves true once the kernel took them, false if the socket went. */
  send: (head: Buffer, bytes: Buffer) => Promise<boolean>;
  /** Fault injection for tests: flip one byte of every piece pushed. */
  corruptUploads?: boolean;
  /**
   * Pass a piece pushed to this agent on to the child as its bytes land, before it is verified here
   * (the child verifies it itself); off under an upload throttle, which meters whole writes.
   */
  cutThrough?: boolean;
}

export class RingPushSession {
  private readonly pusher: RingPusher;
  private readonly unwatch: () => void;
  private readonly unwatchArriving: () => void;
  /** A piece passed on while it arrives: its buffer (pinned), bytes written so far, the pin's release. */
  private streaming: { piece: number; bytes: Buffer; sent: number; release: () => void } | undefined;
  private sending = false;
  private pumpQueued = false;
  private closed = false;
  /** Pieces pushed whole, for tests and logs. */
  pushed = 0;

  constructor(
    private readonly socket: Socket,
    private readonly model: ServedModel,
    private readonly ring: RingSource,
    childHeld: Uint32Array,
    private readonly options: PushSessionOptions,
  ) {
    this.pusher = new RingPusher(model.pieceCount);
    // Watch first, then take the bitfield: a piece verified in between is queued twice at worst,
    // and the pusher drops the second.
    this.unwatch = ring.watchVerified((piece) => {
      this.pusher.verified(piece);
      // On the next turn: a fetched run joins the recent pieces just after its pieces are announced,
      // and a push lent from memory costs no disk read.
      if (!this.pumpQueued) {
        this.pumpQueued = true;
        setImmediate(() => {
          this.pumpQueued = false;
          this.pump();
        });
      }
    });
    this.unwatchArriving =
      options.cutThrough === true && options.corruptUploads !== true && ring.watchArriving !== undefined
        ? ring.watchArriving({
            start: (piece, bytes, pin) => this.streamStart(piece, bytes, pin),
            progress: (piece, filled) => this.streamProgress(piece, filled),
            end: (piece, whole) => {
              if (!whole && this.streaming?.piece === piece) this.streamDone(false);
            },
          })
        : () => undefined;
    this.pusher.subscribe(childHeld, ring.heldBitfield());
    socket.once('close', () => this.close());
    this.pump();
  }

  /** The child holds `piece` now (a HAVE). */
  childHas(piece: number): void {
    this.pusher.childHas(piece);
  }

  /** Whether a push is being written (a silent connection then means a child that stopped reading). */
  get busy(): boolean {
    return this.sending;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.unwatch();
    this.unwatchArriving();
    this.streaming?.release();
    this.streaming = undefined;
    this.pusher.unsubscribe();
  }

  /**
   * Cut-through: a piece starts arriving from this agent's own ring parent; if nothing is being
   * pushed and the child lacks it, its head goes out now and its bytes follow as they land. A piece
   * that then fails this agent's check reaches the child anyway, which checks it too and cuts the
   * feed; one that stops arriving ends the connection (the child then has a truncated push).
   */
  private streamStart(piece: number, bytes: Buffer, pin: () => () => void): void {
    if (this.sending || this.closed || this.socket.destroyed || !this.pusher.take(piece)) return;
    this.sending = true;
    this.streaming = { piece, bytes, sent: 0, release: pin() };
    // The head rides with the first bytes.
    this.socket.cork();
    this.socket.write(encodePushHead(piece, bytes.length));
  }

  private streamProgress(piece: number, filled: number): void {
    const streaming = this.streaming;
    if (streaming === undefined || streaming.piece !== piece || filled <= streaming.sent) return;
    const chunk = streaming.bytes.subarray(streaming.sent, filled);
    const first = streaming.sent === 0;
    streaming.sent = filled;
    if (filled < streaming.bytes.length) {
      this.socket.write(chunk);
      if (first) this.socket.uncork();
      return;
    }
    const written = writeDone(this.socket, chunk);
    if (first) this.socket.uncork();
    // Every byte is with the socket, in order: the next piece may follow it at once (the next
    // arrival, cut through, or the queue); the buffer stays pinned until the kernel took it.
    this.streaming = undefined;
    this.sending = false;
    void written.then((ok) => {
      streaming.release();
      if (ok) this.pushed++;
      else this.socket.destroy();
    });
    this.pump();
  }

  /** A piece being cut through stopped arriving: the child cannot get it whole, so the connection goes. */
  private streamDone(ok: boolean): void {
    const streaming = this.streaming;
    if (streaming === undefined) return;
    this.streaming = undefined;
    if (streaming.sent === 0) this.socket.uncork();
    streaming.release();
    this.sending = false;
    if (!ok) this.socket.destroy();
  }

  private pump(): void {
    if (this.sending || this.closed || this.socket.destroyed) return;
    const piece = this.pusher.next();
    if (piece < 0) return;
    this.sending = true;
    this.pushOne(piece)
      .then((sent) => {
        if (sent) this.pushed++;
        else this.socket.destroy();
      })
      .catch(() => this.socket.destroy())
      .finally(() => {
        this.sending = false;
        this.pump();
      });
  }

  private async pushOne(piece: number): Promise<boolean> {
    const length = this.ring.pieceLength(piece);
    const head = encodePushHead(piece, length);
    const corrupt = this.options.corruptUploads === true;
    const borrowed = corrupt ? undefined : this.model.borrow?.(piece, 0, length);
    if (borrowed !== undefined) {
      let taken = false;
      try {
        taken = await this.options.send(head, borrowed.bytes);
      } finally {
        borrowed.release(taken);
      }
      return taken;
    }
    const { uploads } = this.options;
    const pooled = uploads.take(length, this.model.pieceSize);
    let reusable = false;
    try {
      const bytes = pooled.subarray(0, length);
      await this.model.read(piece, 0, bytes);
      if (corrupt) bytes[length >> 1] = (bytes[length >> 1] ?? 0) ^ 0xff;
      reusable = await this.options.send(head, bytes);
    } finally {
      // A buffer whose write did not complete may still be referenced by the socket.
      if (reusable) uploads.giveBack(pooled);
    }
    return reusable;
  }
}
