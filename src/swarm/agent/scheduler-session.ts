/**
 * SchedulerSession: a member's conversation with the scheduler. It registers the host (with its
 * have-map and, when small, the manifest), then holds the sync channel (wire/sync-channel.ts) open:
 * replies (assignments, cancellations, known peers) are handed to the member as they arrive;
 * reports, ending notices and urgent pieces go out batched per microtask; an empty sync every
 * heartbeat says the host is alive, and a scheduler that sends nothing for `schedulerSilenceMs` is
 * lost. A lost or unreachable scheduler is registered with again, with backoff, until the member
 * closes; while it is unreachable `schedulerDown` is set and the member fetches on its own.
 */

import { setTimeout as sleep } from 'node:timers/promises';
import type { Socket } from 'node:net';
import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError, abortError, isWeightcastError } from '../../errors.js';
import type { PieceMap } from '../../piece/piece-map.js';
import { callJson } from '../wire/http-json.js';
import {
  encodeBitfield,
  parseMessage,
  registeredSchema,
  syncReplySchema,
  SYNC_ITEMS_MAX,
  type Register,
  type Report,
  type SyncReply,
} from '../wire/protocol.js';
import { FrameReader, encodeFrame, frameError, openChannel } from '../wire/sync-channel.js';
import { RING_REPORT_MS_DEFAULT } from '../core/ring-plan.js';
import type { MemberStore } from './member-store.js';

export interface MemberIdentity {
  name: string;
  /** Base URL of this host's piece server, as peers reach it. */
  url: string;
  zone?: string;
  rack?: string;
  uploadBytesPerSecond: number;
  downloadBytesPerSecond: number;
}

export interface SchedulerSessionOptions {
  model: string;
  map: PieceMap;
  manifestBytes: Buffer;
  store: MemberStore;
  schedulerUrl: string;
  /** The cluster credential (and TLS) sent to the scheduler. */
  access?: ServiceAccess | undefined;
  identity: MemberIdentity;
  schedulerSilenceMs: number;
  /** How long a registration may go unanswered before a host with kept peers fetches from them (REGISTRATION_SLOW_MS). */
  registrationSlowMs?: number;
  manifestInlineBytesMax: number;
  /** Aborted when the member closes. */
  signal: AbortSignal;
  /** Whether a transfer is still running (notices for ended ones are dropped). */
  isRunning(transferId: number): boolean;
  /** A reply's assignments and cancellations (also the first assignments of a registration). */
  onReply(reply: SyncReply): void;
  onRegistered(host: number): void;
  /** The scheduler was lost (`announce`: say so; a first failed registration is not news). */
  onLost(reason: string, announce: boolean): void;
  /** The scheduler refused this host's credential or certificate: asking again cannot help. */
  onRefused(error: WeightcastError): void;
  /** The peers this host knew before it started (kept by the agent): known until the scheduler names others. */
  peers?: readonly string[];
  /** The scheduler named the peers anew (for the agent to keep). */
  onPeers?(peers: readonly string[]): void;
}

const REGISTER_RETRY_MS = 500;
/**
 * A registration unanswered this long, by a host that kept peers from before (a restarted agent),
 * sends it to those peers for pieces while it waits: `registrationSlow`, peers only, no origin
 * reads (a scheduler that is merely slow keeps the origin's share). The origin too only once the
 * scheduler is as good as silent (schedulerSilenceMs). As long as a chain's head waits (HEAD_ALONE_MS).
 * Chaos stop-scheduler-kill: the restarted hosts had waited the whole 5 s.
 */
export const REGISTRATION_SLOW_MS = 1000;
/**
 * Answers from the scheduler that trying again cannot change: the model stops with them. A name in
 * use by a live host at another address is a second agent configured with this one's name (or an
 * impostor); waiting would retry forever while that host lives. A host removed as distrusted
 * receives bytes that fail verification (or lies): the model cannot complete here.
 */
const REFUSALS = new Set(['UNAUTHORIZED', 'TLS_UNTRUSTED', 'SWARM_NAME_IN_USE', 'SWARM_DISTRUSTED']);
const REGISTER_RETRY_MAX_MS = 2000;
const SCHEDULER_TIMEOUT_MS = 10_000;
/** How long leave() waits for a registration still on its way, to undo it. */
const LEAVE_WAIT_MS = 2000;

/** `promise`, or an abort error as soon as `signal` aborts (the promise itself goes on). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(abortError(signal, 'registering'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortError(signal, 'registering'));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
/** An empty sync this often on the channel: the heartbeat (well inside the scheduler's host timeout). */
const HEARTBEAT_MS = 2000;
/** Weight of the newest sample in the running estimate of the scheduler round trip. */
const EWMA_WEIGHT = 0.2;
/**
 * A report that frees nothing (its transfer's slot went with its ending notice) waits this long for
 * another frame to ride on: at ~45 pieces a second an agent sends a notice or a report every ~10 ms,
 * and a frame fewer is a system call fewer here and a wake-up fewer at the scheduler. The scheduler
 * counts the piece as held here that much later.
 */
export const REPORT_DEFER_MS = 20;

export class SchedulerSession {
  /** The host id of the current registration, if any. */
  host: number | undefined;
  /** Set when the scheduler stopped answering; the member then fetches on its own. */
  schedulerDown = false;
  /**
   * Set while a registration has gone unanswered for registrationSlowMs and this host knows peers:
   * the member fetches from them meanwhile, and from no origin (REGISTRATION_SLOW_MS).
   */
  registrationSlow = false;
  /** When the scheduler last sent anything on the sync channel (performance.now() ms). */
  private heardAt: number | undefined;
  /** The registration request on its way, if any (see register and leave). */
  private registering: Promise<unknown> | undefined;
  /** The kind of the last failure said (see lose): the same one again is not said again. */
  private lastLoss: string | undefined;
  /** Peers the scheduler last named (or, before it named any, those kept from before), for fetching on its own: base URLs. */
  knownPeers: string[];
  /** How many of `knownPeers`, the first ones, share this host's rack (undefined: no racks). */
  knownRackPeers: number | undefined;
  /** Running estimate of a short sync's round trip. */
  roundTripMs: number | undefined;
  private readonly reports: Report[] = [];
  private readonly urgentPieces = new Set<number>();
  /** Transfers to announce as ending on the next sync. */
  private readonly endingNotices = new Set<number>();
  /** When the oldest unanswered report or notice went out (for the round-trip estimate). */
  private roundTripFrom: number | undefined;
  private channel: Socket | undefined;
  private flushQueued = false;
  /** Reports held back (deferrable ones) until another frame or this timer. */
  private deferredReports: Report[] = [];
  private deferTimer: ReturnType<typeof setTimeout> | undefined;
  /** Ring mode: pieces pushed to this host, told in one batch every RING_REPORT_MS_DEFAULT. */
  private ringPieces: number[] = [];
  private ringTimer: ReturnType<typeof setTimeout> | undefined;
  private ringDue = false;
  private ringLostReason: string | undefined;
  private ringLostParent: string | undefined;
  private ringLostPiece: number | undefined;

  constructor(private readonly options: SchedulerSessionOptions) {
    this.knownPeers = [...(options.peers ?? [])];
  }

  /** Registers and holds the channel, again and again, until the member closes. */
  async run(): Promise<void> {
    const signal = this.options.signal;
    let backoff = REGISTER_RETRY_MS;
    while (!signal.aborted) {
      try {
        if (this.host === undefined) {
          await this.register();
          backoff = REGISTER_RETRY_MS;
          continue;
        }
        await this.runChannel(this.host);
      } catch (error) {
        if (signal.aborted) return;
        // A scheduler that refuses our credential or certificate will refuse it again: stop, saying why.
        if (isWeightcastError(error) && REFUSALS.has(error.code)) {
          this.options.onRefused(error);
          return;
        }
        this.lose(error);
        await sleep(backoff, undefined, { signal }).catch(() => undefined);
        backoff = Math.min(REGISTER_RETRY_MAX_MS, backoff * 2);
      }
    }
  }

  /**
   * Leaves the swarm politely, if the scheduler answers; a registration still on its way (the
   * member closed while it was) is waited for, up to LEAVE_WAIT_MS, and undone too.
   */
  async leave(): Promise<void> {
    let host = this.host;
    this.host = undefined;
    const registering = this.registering;
    this.registering = undefined;
    if (host === undefined && registering !== undefined) {
      const raw = await Promise.race([
        registering.catch(() => undefined),
        sleep(LEAVE_WAIT_MS, undefined, { ref: false }),
      ]);
      try {
        host = parseMessage(registeredSchema, raw, 'register reply').host;
      } catch {
        return; // refused, failed or still unanswered: nothing to undo that we can name
      }
    }
    if (host === undefined) return;
    await callJson(`${this.swarmUrl()}/hosts/${host}`, 'the scheduler', {
      method: 'DELETE',
      timeoutMs: 2000,
      access: this.options.access,
    }).catch(() => undefined);
  }

  /**
   * `deferrable`: the transfer's ending notice went out already, so the scheduler has planned what
   * follows it; the report may wait up to REPORT_DEFER_MS for another frame.
   */
  report(report: Report, deferrable = false): void {
    if (deferrable) {
      this.deferredReports.push(report);
      if (this.deferTimer === undefined) {
        this.deferTimer = setTimeout(() => {
          this.deferTimer = undefined;
          this.takeDeferred();
          this.flush();
        }, REPORT_DEFER_MS);
        this.deferTimer.unref();
      }
      return;
    }
    this.reports.push(report);
    this.flush();
  }

  /** Deferred reports join the next frame. */
  private takeDeferred(): void {
    if (this.deferredReports.length === 0) return;
    this.reports.push(...this.deferredReports);
    this.deferredReports = [];
    clearTimeout(this.deferTimer);
    this.deferTimer = undefined;
  }

  /** The transfer is about to end: the scheduler may plan the host's next download now. */
  ending(transferId: number): void {
    this.endingNotices.add(transferId);
    this.flush();
  }

  forgetEnding(transferId: number): void {
    this.endingNotices.delete(transferId);
  }

  /** Pieces a reader is blocked on, sent with every sync until held. */
  urgent(pieces: readonly number[]): void {
    let added = false;
    for (const piece of pieces) {
      if (this.options.store.has(piece) || this.urgentPieces.has(piece)) continue;
      this.urgentPieces.add(piece);
      added = true;
    }
    if (added) this.flush();
  }

  get urgentSet(): ReadonlySet<number> {
    return this.urgentPieces;
  }

  held(piece: number): void {
    this.urgentPieces.delete(piece);
  }

  /**
   * Ring mode: `piece` came from the ring parent, verified and stored. Told with the next frame, and
   * within RING_REPORT_MS_DEFAULT at the latest: one delta for many pieces, not a report each.
   */
  ringHeld(piece: number): void {
    this.ringPieces.push(piece);
    if (this.ringTimer !== undefined) return;
    this.ringTimer = setTimeout(() => {
      this.ringTimer = undefined;
      this.ringDue = true;
      this.flush();
    }, RING_REPORT_MS_DEFAULT);
    this.ringTimer.unref();
  }

  /** Ring mode: the feed from the ring parent `parent` ended with an error; the scheduler is told at once. */
  ringLost(reason: string, parent: string, piece?: number): void {
    this.ringLostReason = reason;
    this.ringLostParent = parent;
    this.ringLostPiece = piece;
    this.flush();
  }

  private swarmUrl(): string {
    return `${this.options.schedulerUrl.replace(/\/+$/, '')}/v1/swarms/${this.options.model}`;
  }

  /**
   * Holds the sync channel open until it breaks (which throws) or the member closes: replies
   * arriving on it are applied, reports go out on it as they happen, an empty sync every
   * heartbeat period tells the scheduler this host is alive.
   */
  private async runChannel(host: number): Promise<void> {
    const signal = this.options.signal;
    const { socket, head } = await openChannel(
      `${this.swarmUrl()}/hosts/${host}/channel`,
      signal,
      this.options.access,
    );
    socket.setNoDelay(true);
    const reader = new FrameReader();
    let heartbeat: ReturnType<typeof setInterval> | undefined;
    let heardMs = performance.now();
    this.heardAt = heardMs;
    const silenceMs = this.options.schedulerSilenceMs;
    try {
      await new Promise<void>((resolve, reject) => {
        const onData = (chunk: Buffer): void => {
          heardMs = performance.now();
          this.heardAt = heardMs;
          try {
            for (const frame of reader.push(chunk)) {
              const error = frameError(frame, 'the scheduler');
              if (error !== undefined) throw error;
              if (this.host !== host) continue;
              if (this.roundTripFrom !== undefined) {
                this.roundTripMs = ewma(this.roundTripMs, performance.now() - this.roundTripFrom);
                this.roundTripFrom = undefined;
              }
              const reply = parseMessage(syncReplySchema, frame, 'sync reply');
              if (reply.peers !== undefined) {
                this.knownPeers = reply.peers;
                this.knownRackPeers = reply.rackPeers;
                this.options.onPeers?.(reply.peers);
              }
              this.options.onReply(reply);
            }
          } catch (error) {
            reject(error instanceof Error ? error : new Error(String(error)));
            socket.destroy();
          }
        };
        const onAbort = (): void => {
          socket.destroy();
          resolve();
        };
        signal.addEventListener('abort', onAbort, { once: true });
        socket.on('data', onData);
        socket.on('error', () => undefined);
        socket.on('close', () => {
          signal.removeEventListener('abort', onAbort);
          if (this.channel === socket) this.channel = undefined;
          reject(new WeightcastError('SCHEDULER_UNREACHABLE', 'the sync channel to the scheduler closed'));
        });
        this.channel = socket;
        heartbeat = setInterval(
          () => {
            if (performance.now() - heardMs > silenceMs) {
              reject(
                new WeightcastError(
                  'SCHEDULER_UNREACHABLE',
                  `the scheduler sent nothing for ${Math.round(silenceMs / 1000)} s`,
                ),
              );
              socket.destroy();
              return;
            }
            this.send(true);
          },
          Math.min(HEARTBEAT_MS, silenceMs / 2),
        );
        if (head.length > 0) onData(head);
        // Reports held while there was no channel go out now; an empty sync if there are none.
        this.send(true);
      });
    } finally {
      clearInterval(heartbeat);
      if (this.channel === socket) this.channel = undefined;
      socket.destroy();
    }
  }

  /** How long the scheduler has sent nothing on the sync channel, in ms (0 before the first channel). */
  silentMs(): number {
    return this.heardAt === undefined ? 0 : performance.now() - this.heardAt;
  }

  private async register(): Promise<void> {
    const { store, map, identity } = this.options;
    const message: Register = {
      name: identity.name,
      url: identity.url,
      uploadBytesPerSecond: identity.uploadBytesPerSecond,
      downloadBytesPerSecond: identity.downloadBytesPerSecond,
      have: encodeBitfield(map.pieceCount, (piece) => store.has(piece)),
      assignmentsInReply: true,
      ...(identity.zone === undefined ? {} : { zone: identity.zone }),
      ...(identity.rack === undefined ? {} : { rack: identity.rack }),
    };
    // The request itself is not cancelled when the member closes: the scheduler may already have
    // made the host, and only its answer lets leave() undo that (else a host that never fetches
    // keeps the origin reads it was given until the host timeout). The member stops waiting at once.
    const post = (withManifest: boolean): Promise<unknown> => {
      const posted = callJson(`${this.swarmUrl()}/hosts`, 'the scheduler', {
        method: 'POST',
        body: withManifest ? { ...message, manifest: this.options.manifestBytes.toString('utf8') } : message,
        timeoutMs: SCHEDULER_TIMEOUT_MS,
        access: this.options.access,
      });
      this.registering = posted;
      return untilAborted(posted, this.options.signal);
    };
    // A small manifest goes with the first try: agents joining a new model together would otherwise
    // each be told the model is unknown and ask again. A large one is sent only when asked for.
    const inline = this.options.manifestBytes.length <= this.options.manifestInlineBytesMax;
    // A scheduler that has not answered a registration for as long as a registered host waits
    // before it goes on its own (schedulerSilenceMs) is as good as silent: the member fetches on
    // its own meanwhile (from the peers it kept, if it was restarted), and the registration goes on.
    // Chaos, an agent restarted while the scheduler was stopped: it waited out the request's 10 s.
    const silent = setTimeout(() => {
      if (this.host === undefined) this.schedulerDown = true;
    }, this.options.schedulerSilenceMs);
    silent.unref();
    const slow = setTimeout(() => {
      if (this.host === undefined && this.knownPeers.length > 0) this.registrationSlow = true;
    }, this.options.registrationSlowMs ?? REGISTRATION_SLOW_MS);
    slow.unref();
    let raw: unknown;
    try {
      raw = await post(inline);
    } catch (error) {
      if (inline || !isWeightcastError(error, 'SWARM_UNKNOWN_MODEL')) throw error;
      raw = await post(true);
    } finally {
      clearTimeout(silent);
      clearTimeout(slow);
      this.registrationSlow = false;
    }
    this.registering = undefined;
    const registered = parseMessage(registeredSchema, raw, 'register reply');
    // Reports of an earlier registration are void; its fetches may finish, but not report. Ring
    // pieces went with the registration's bitfield.
    this.reports.length = 0;
    this.ringPieces = [];
    this.ringLostReason = undefined;
    this.ringLostParent = undefined;
    this.ringLostPiece = undefined;
    this.deferredReports = [];
    clearTimeout(this.deferTimer);
    this.deferTimer = undefined;
    this.host = registered.host;
    this.schedulerDown = false;
    if (registered.peers !== undefined) {
      this.knownPeers = registered.peers;
      this.knownRackPeers = registered.rackPeers;
      this.options.onPeers?.(registered.peers);
    }
    this.lastLoss = undefined;
    this.options.onRegistered(registered.host);
    // The first transfers start now, and a ring feed opens; reports wait for the channel, which opens next.
    if (
      (registered.assignments !== undefined && registered.assignments.length > 0) ||
      registered.ring !== undefined
    ) {
      this.options.onReply({
        assignments: registered.assignments ?? [],
        cancellations: [],
        ...(registered.ring === undefined ? {} : { ring: registered.ring }),
      });
    }
  }

  private lose(error: unknown): void {
    let reason = error instanceof Error ? error.message : String(error);
    // Not a weightcast scheduler at all (a wrong --scheduler that some other server answers): as
    // good as unreachable, and worth saying so.
    const foreign = isWeightcastError(error) && error.details.foreign === true;
    if (foreign) reason += ' (not a weightcast scheduler: check --scheduler)';
    const down = foreign || isWeightcastError(error, 'SCHEDULER_UNREACHABLE');
    // A registered host losing the scheduler is news, and so is a failure unlike the last one (a
    // wrong --scheduler would otherwise go unmentioned); the same failure again, at every retry
    // with backoff, is not.
    const kind = isWeightcastError(error) ? `${error.code}${foreign ? '/foreign' : ''}` : 'error';
    const announce = this.host !== undefined || kind !== this.lastLoss;
    this.lastLoss = kind;
    this.host = undefined;
    // A scheduler that is not there sends the member out on its own; a refusal just re-registers.
    if (down) this.schedulerDown = true;
    this.options.onLost(reason, announce);
  }

  /** Sends what is waiting (reports, ending notices, urgent pieces) on the next microtask, batched. */
  private flush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    queueMicrotask(() => {
      this.flushQueued = false;
      this.send(false);
    });
  }

  /** Writes one sync frame if there is a channel and something to say (or `always`: a heartbeat). */
  private send(always: boolean): void {
    const channel = this.channel;
    if (channel === undefined || channel.destroyed || this.host === undefined) return;
    const ending = [...this.endingNotices].filter((transferId) => this.options.isRunning(transferId));
    this.endingNotices.clear();
    // Urgent pieces are re-sent with every sync until held; the core ignores repeats.
    for (const piece of this.urgentPieces) if (this.options.store.has(piece)) this.urgentPieces.delete(piece);
    const urgent = [...this.urgentPieces];
    const lost = this.ringLostReason;
    const lostParent = this.ringLostParent;
    const lostPiece = this.ringLostPiece;
    if (
      !always &&
      this.reports.length === 0 &&
      ending.length === 0 &&
      urgent.length === 0 &&
      lost === undefined &&
      !(this.ringDue && this.ringPieces.length > 0)
    )
      return;
    this.takeDeferred();
    this.ringLostReason = undefined;
    this.ringLostParent = undefined;
    this.ringLostPiece = undefined;
    this.ringDue = false;
    clearTimeout(this.ringTimer);
    this.ringTimer = undefined;
    const held = this.ringPieces.splice(0, SYNC_ITEMS_MAX);
    const reports = this.reports.splice(0, SYNC_ITEMS_MAX);
    if (reports.length > 0 || ending.length > 0) this.roundTripFrom ??= performance.now();
    channel.write(
      encodeFrame({
        reports,
        waitMs: 0,
        ...(urgent.length > 0 ? { urgent: urgent.slice(0, SYNC_ITEMS_MAX) } : {}),
        ...(ending.length > 0 ? { ending: ending.slice(0, SYNC_ITEMS_MAX) } : {}),
        ...(held.length > 0 ? { held } : {}),
        ...(lost === undefined ? {} : { ringLost: lost }),
        ...(lost === undefined || lostParent === undefined ? {} : { ringLostParent: lostParent }),
        ...(lost === undefined || lostPiece === undefined ? {} : { ringLostPiece: lostPiece }),
      }),
    );
    if (this.reports.length > 0) this.flush();
    if (this.ringPieces.length > 0) {
      // More than one frame's worth: the rest goes in the next.
      this.ringDue = true;
      this.flush();
    }
  }
}

function ewma(previous: number | undefined, sample: number): number {
  return previous === undefined ? sample : previous + EWMA_WEIGHT * (sample - previous);
}
