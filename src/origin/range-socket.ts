/**
 * RangeClient: HttpOrigin's fast path for plain-http ranged reads. It speaks just enough HTTP/1.1
 * for one job, `GET` with `Range: bytes=a-b`, and has the kernel write the body straight into the
 * caller's buffer.
 *
 * How bytes move: every socket is opened with Node's `onread` option, so each read lands in the
 * buffer that the connection's ResponseReader (response-reader.ts) names at that moment: its head
 * buffer while a head is awaited, then the unfilled rest of the caller's target. No chunk objects
 * are made and JavaScript copies no body bytes, apart from those that arrive with the head.
 *
 * Around that: a keep-alive pool per origin (at most `connections` sockets; a socket goes back to
 * it only after a complete response with a trusted length, and idle ones close after a while), HTTP/1.1
 * pipelining when asked for (`pipeline` > 1: with every socket busy, a request is written on one
 * that already answered a keep-alive response, behind at most `pipeline - 1` others, so its
 * response follows the one before it with no round trip between them), the
 * connect, headers and body-silence timeouts, and the caller's AbortSignal, which destroys the
 * socket at once. Failures this module detects are WeightcastErrors whose `details.retryable` marks
 * the transient ones; socket errors (ECONNRESET, ...) pass through with their Node codes for the
 * caller to classify, as undici's do.
 */

import type { IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { ReceiveLowWater } from '../util/receive-low-water.js';
import { WeightcastError, abortError, assert, isWeightcastError, throwIfAborted } from '../errors.js';
import {
  HEAD_BYTES_MAX,
  ResponseReader,
  isFieldName,
  isFieldValue,
  type ReadProblem,
  type ReadStep,
  type ReceivedResponse,
} from './response-reader.js';

export interface RangeClientOptions {
  /** Sockets per origin, busy and idle together. */
  connections: number;
  connectTimeoutMs: number;
  /** Time allowed from sending a request (or connecting, if later) to receiving the whole head. */
  headersTimeoutMs: number;
  /** Longest silence allowed while a body is being read. */
  bodyIdleTimeoutMs: number;
  /** How long an idle socket is kept for reuse. */
  idleSocketTimeoutMs: number;
  /**
   * Requests in flight per socket (HTTP/1.1 pipelining); 1, the default, sends the next request only
   * after the last response. A pipelined request's headers timeout counts from the end of the
   * response before it.
   */
  pipeline?: number;
}

export interface RangeGet {
  /** An `http:` URL. */
  url: URL;
  /** Sent after `host`, as given: the caller puts `range` here. */
  headers: Readonly<Record<string, string>>;
  /**
   * Where an accepted body goes; never empty. The kernel writes into it directly, so it must stay
   * attached (not transferred to a worker) until `get` settles.
   */
  target: Uint8Array;
  /** Whether a head answers the range asked; its body fills `target` only if so. */
  accepts: (head: { status: number; headers: IncomingHttpHeaders }) => boolean;
  /** Called as body bytes land in `target`, in order, before the read resolves or fails. */
  onBodyBytes: (count: number) => void;
  signal?: AbortSignal | undefined;
  /** For errors: what is being read, and the file it is part of. */
  what: string;
  file: string;
}

export type RangeResponse = ReceivedResponse;

/** Distinct origins with live sockets; a redirect chain touches a few. */
const ORIGINS_MAX = 256;
/** Callers queued for a socket of one origin. */
const WAITERS_MAX = 4096;
/** Extra attempts on a fresh socket when a kept-alive one turns out to be closed by the server. */
const STALE_SOCKET_RETRIES = 1;

export class RangeClient {
  private readonly options: RangeClientOptions;
  private readonly pools = new Map<string, OriginPool>();
  private closed = false;

  constructor(options: RangeClientOptions) {
    assert(Number.isSafeInteger(options.connections) && options.connections >= 1, 'connections >= 1');
    const pipeline = options.pipeline ?? 1;
    assert(Number.isSafeInteger(pipeline) && pipeline >= 1, 'pipeline >= 1');
    this.options = options;
  }

  /** Sends the GET and resolves once the body filled `target` or the response was set aside. */
  async get(request: RangeGet): Promise<RangeResponse> {
    throwIfAborted(request.signal, request.what);
    const head = requestHead(request);
    const pool = this.poolFor(request);
    for (let attempt = 0; attempt <= STALE_SOCKET_RETRIES; attempt++) {
      const connection = await pool.acquire(request);
      const reused = connection.completed > 0;
      try {
        const outcome = await connection.exchange(request, head);
        pool.release(connection, outcome.reusable);
        return outcome.response;
      } catch (error) {
        pool.release(connection, false);
        const stale = reused && !connection.heardBack && isStaleSocketError(error, request);
        if (!(stale || isUnansweredError(error, request)) || attempt === STALE_SOCKET_RETRIES) throw error;
      }
    }
    assert(false, 'the attempt loop returns or throws on its last attempt');
  }

  /** Destroys every socket; reads in flight fail with ORIGIN_IO. */
  async close(): Promise<void> {
    this.closed = true;
    const pools = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(pools.map((pool) => pool.close()));
  }

  private poolFor(request: RangeGet): OriginPool {
    const { url } = request;
    assert(url.protocol === 'http:', 'RangeClient reads plain-http URLs only');
    if (this.closed) throw closedError(request);
    const key = `${hostOf(url)}:${portOf(url)}`;
    const existing = this.pools.get(key);
    if (existing !== undefined) return existing;
    if (this.pools.size >= ORIGINS_MAX) {
      const message = `${request.what}: more than ${ORIGINS_MAX} origins in use`;
      throw new WeightcastError('LIMIT_EXCEEDED', message, { file: request.file });
    }
    const pool = new OriginPool(url, this.options, () => this.pools.delete(key));
    this.pools.set(key, pool);
    return pool;
  }
}

interface Waiter {
  grant(connection: Connection): void;
  /** The pool is closing. */
  refuse(): void;
}

/** The sockets of one origin: every one is in `connections`, and the idle ones also in `idle`. */
class OriginPool {
  private readonly url: URL;
  private readonly options: RangeClientOptions;
  private readonly onEmpty: () => void;
  private readonly connections = new Set<Connection>();
  private readonly idle: Connection[] = [];
  private readonly waiters: Waiter[] = [];
  private closing = false;

  constructor(url: URL, options: RangeClientOptions, onEmpty: () => void) {
    this.url = url;
    this.options = options;
    this.onEmpty = onEmpty;
  }

  acquire(request: RangeGet): Promise<Connection> {
    if (this.closing) return Promise.reject(closedError(request));
    const connection =
      this.takeIdle() ??
      (this.connections.size < this.options.connections ? this.open() : undefined) ??
      this.pipelinable();
    if (connection === undefined) return this.wait(request);
    connection.leases += 1;
    return Promise.resolve(connection);
  }

  /**
   * Takes the connection back after an exchange (failed or not): to the next waiter, to the idle
   * list, or to its end. One still answering pipelined requests stays busy and may take a waiter's
   * request too. A failed exchange that broke the socket has destroyed it already.
   */
  release(connection: Connection, reusable: boolean): void {
    connection.leases -= 1;
    if (this.closing) {
      connection.destroy();
      return;
    }
    if (connection.leases > 0 || connection.exchanges > 0) {
      if (reusable && connection.acceptsPipelined(this.depth)) this.grantWaiter(connection);
      return;
    }
    if (!reusable || !connection.usable) {
      connection.destroy();
      return;
    }
    if (this.grantWaiter(connection)) return;
    connection.park(this.options.idleSocketTimeoutMs);
    this.idle.push(connection);
  }

  private grantWaiter(connection: Connection): boolean {
    const waiter = this.waiters.shift();
    if (waiter === undefined) return false;
    connection.leases += 1;
    waiter.grant(connection);
    return true;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const waiter of this.waiters.splice(0)) waiter.refuse();
    const connections = [...this.connections];
    for (const connection of connections) connection.shutDown();
    await Promise.all(connections.map((connection) => connection.closed));
  }

  private get depth(): number {
    return this.options.pipeline ?? 1;
  }

  /** The busy connection with the fewest requests in flight that takes one more, if any. */
  private pipelinable(): Connection | undefined {
    if (this.depth <= 1) return undefined;
    let best: Connection | undefined;
    for (const connection of this.connections) {
      if (!connection.acceptsPipelined(this.depth)) continue;
      if (best === undefined || connection.leases < best.leases) best = connection;
    }
    return best;
  }

  private takeIdle(): Connection | undefined {
    for (let left = this.idle.length; left > 0; left--) {
      const connection = this.idle.pop();
      if (connection?.usable === true) {
        connection.unpark();
        return connection;
      }
      connection?.destroy();
    }
    return undefined;
  }

  private open(): Connection {
    const connection = new Connection(this.url, this.options, () => this.forget(connection));
    this.connections.add(connection);
    return connection;
  }

  /** A socket closed: its slot goes to the first waiter, or the pool ends when nothing is left. */
  private forget(connection: Connection): void {
    this.connections.delete(connection);
    const index = this.idle.indexOf(connection);
    if (index !== -1) this.idle.splice(index, 1);
    if (this.closing) return;
    if (this.waiters.length > 0) this.grantWaiter(this.open());
    else if (this.connections.size === 0) this.onEmpty();
  }

  private wait(request: RangeGet): Promise<Connection> {
    if (this.waiters.length >= WAITERS_MAX) {
      const message = `${request.what}: more than ${WAITERS_MAX} reads wait for a connection`;
      return Promise.reject(new WeightcastError('LIMIT_EXCEEDED', message, { file: request.file }));
    }
    const { signal } = request;
    return new Promise<Connection>((resolve, reject) => {
      const onAbort = (): void => {
        const index = this.waiters.indexOf(waiter);
        if (index !== -1) this.waiters.splice(index, 1);
        reject(abortError(signal, request.what));
      };
      const waiter: Waiter = {
        grant: (connection) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(connection);
        },
        refuse: () => {
          signal?.removeEventListener('abort', onAbort);
          reject(closedError(request));
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }
}

interface Exchange {
  request: RangeGet;
  resolve(outcome: Outcome): void;
  reject(error: unknown): void;
}

interface Outcome {
  response: RangeResponse;
  reusable: boolean;
}

type TimerPhase = 'connect' | 'headers' | 'body';

/**
 * One socket: feeds its reads to a ResponseReader and runs its exchanges in order, one at a time or,
 * pipelined, several written at once and answered one after another.
 */
class Connection {
  // Declared before `socket`: `connect` asks for the first read buffer before it returns.
  private readonly reader = new ResponseReader();
  private readonly socket: Socket;
  /** The kernel holds a body's bytes back until this many are queued (receive-low-water.ts). */
  private readonly lowWater: ReceiveLowWater;
  private readonly options: RangeClientOptions;
  /** Resolves once the socket has closed. */
  readonly closed: Promise<void>;
  /** Exchanges that finished on this socket; above zero means it was kept alive. */
  completed = 0;
  /** Callers the pool handed this socket to and that have not given it back (OriginPool's count). */
  leases = 0;
  private connected = false;
  /** Exchanges whose requests were written, the one being answered first. */
  private readonly queue: Exchange[] = [];
  /** A pipelined exchange behind the current one was given up: close once the current one ends. */
  private closeAfterCurrent = false;
  private timer: NodeJS.Timeout | undefined;
  private timerPhase: TimerPhase | undefined;
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(url: URL, options: RangeClientOptions, onClose: () => void) {
    this.options = options;
    this.socket = connect({
      host: hostOf(url),
      port: portOf(url),
      noDelay: true,
      onread: { buffer: () => this.reader.buffer(), callback: (count) => this.onRead(count) },
    });
    this.lowWater = new ReceiveLowWater(this.socket);
    this.socket.on('connect', () => this.onConnect());
    this.socket.on('end', () => this.onEnd());
    this.socket.on('error', (error) => this.fail(error));
    this.closed = new Promise<void>((resolve) => {
      this.socket.once('close', () => {
        this.fail(undefined);
        clearTimeout(this.idleTimer);
        onClose();
        resolve();
      });
    });
  }

  /** Open, with no exchange under way and nothing half-read. */
  get usable(): boolean {
    return this.queue.length === 0 && !this.socket.destroyed && this.reader.idle;
  }

  /** Exchanges written and not yet answered. */
  get exchanges(): number {
    return this.queue.length;
  }

  /**
   * Whether one more request may be written behind those in flight: the socket already answered a
   * keep-alive response (so the server speaks HTTP/1.1 and frames its answers), fewer than `depth`
   * callers hold it, and nothing was given up on it.
   */
  acceptsPipelined(depth: number): boolean {
    return (
      this.leases > 0 &&
      this.leases < depth &&
      this.completed > 0 &&
      !this.closeAfterCurrent &&
      !this.socket.destroyed
    );
  }

  get heardBack(): boolean {
    return this.reader.heardBack;
  }

  async exchange(request: RangeGet, head: string): Promise<Outcome> {
    assert(this.queue.length === 0 || this.completed > 0, 'requests are pipelined only on a proven socket');
    const { signal } = request;
    throwIfAborted(signal, request.what);
    // Closed between being handed out and this call (a pipelined one's current answer failed).
    if (this.socket.destroyed) throw unansweredError(request);
    let exchange: Exchange | undefined;
    const onAbort = (): void => {
      if (exchange !== undefined) this.abandon(exchange, abortError(signal, request.what));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<Outcome>((resolve, reject) => {
        exchange = { request, resolve, reject };
        this.queue.push(exchange);
        this.reader.start({ target: request.target, accepts: request.accepts });
        if (this.queue.length === 1) this.armTimer(this.connected ? 'headers' : 'connect');
        this.socket.write(head);
      });
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Keeps the socket for reuse without holding the process open; it closes after `timeoutMs`. */
  park(timeoutMs: number): void {
    this.socket.unref();
    this.idleTimer = setTimeout(() => this.socket.destroy(), timeoutMs);
    this.idleTimer.unref();
  }

  unpark(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    this.socket.ref();
  }

  destroy(): void {
    this.fail(undefined);
  }

  /** Destroys the socket because the client is closing; exchanges under way fail for good. */
  shutDown(): void {
    const exchange = this.queue[0];
    this.fail(exchange === undefined ? undefined : closedError(exchange.request));
  }

  private onConnect(): void {
    this.connected = true;
    if (this.queue.length > 0) this.armTimer('headers');
  }

  private onRead(count: number): boolean {
    this.apply(this.reader.received(count));
    this.lowWater.expect(count, this.reader.bodyBytesLeft);
    return true;
  }

  private onEnd(): void {
    const step = this.reader.ended();
    if (step === undefined) this.fail(undefined);
    else this.apply(step);
  }

  private apply(step: ReadStep): void {
    const exchange = this.queue[0];
    if (step.kind === 'failed') {
      this.fail(exchange === undefined ? undefined : problemError(step.problem, exchange.request));
      return;
    }
    assert(exchange !== undefined, 'the reader makes progress only during an exchange');
    if (step.bodyBytes > 0) exchange.request.onBodyBytes(step.bodyBytes);
    if (step.kind === 'waiting') {
      this.armTimer(this.reader.readingBody ? 'body' : 'headers');
      return;
    }
    this.queue.shift();
    this.stopTimer();
    this.completed += 1;
    const reusable = step.reusable && !this.closeAfterCurrent;
    // Before anything else runs: no later read may land in a target of a request given up.
    if (!reusable) this.dropAll();
    exchange.resolve({ response: step.response, reusable });
    if (!reusable || this.queue.length === 0) return;
    this.armTimer('headers');
    const carried = this.reader.proceed();
    if (carried !== undefined) this.apply(carried);
  }

  /**
   * The caller gave up on `exchange`. The one being answered fails the socket (its response cannot
   * be skipped without reading it); one still waiting in the pipeline fails alone, with those behind
   * it (retried on another socket), and the socket closes once the current response is in.
   */
  private abandon(exchange: Exchange, error: unknown): void {
    const index = this.queue.indexOf(exchange);
    if (index === -1) return;
    if (index === 0) {
      this.fail(error);
      return;
    }
    // Every pipelined request goes: the reader drops them all, and the socket will close.
    const dropped = this.queue.splice(1);
    this.reader.dropWaiting();
    this.closeAfterCurrent = true;
    for (const other of dropped) {
      other.reject(other === exchange ? error : unansweredError(other.request));
    }
  }

  /**
   * Destroys the socket first, so that no later read can land in a caller's target, then fails the
   * exchange being answered, if any, with `error` or else a retryable "connection closed", and any
   * pipelined behind it as unanswered (the caller may send them again).
   */
  private fail(error: unknown): void {
    const first = this.queue.shift();
    this.dropAll();
    if (first !== undefined) first.reject(error ?? connectionClosedError(first.request, 'mid-response'));
  }

  /** Destroys the socket and fails every exchange left as unanswered: none of their bytes were read. */
  private dropAll(): void {
    this.socket.destroy();
    this.stopTimer();
    for (const exchange of this.queue.splice(0)) exchange.reject(unansweredError(exchange.request));
  }

  private armTimer(phase: TimerPhase): void {
    if (this.timer !== undefined && this.timerPhase === phase) {
      // The body timeout measures silence, so every read restarts it; the others count from their start.
      if (phase === 'body') this.timer.refresh();
      return;
    }
    this.stopTimer();
    const timeoutMs = phaseTimeoutMs(phase, this.options);
    this.timerPhase = phase;
    this.timer = setTimeout(() => this.onTimeout(phase, timeoutMs), timeoutMs);
  }

  private stopTimer(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.timerPhase = undefined;
  }

  private onTimeout(phase: TimerPhase, timeoutMs: number): void {
    const exchange = this.queue[0];
    this.fail(exchange === undefined ? undefined : timeoutError(phase, timeoutMs, exchange.request));
  }
}

/** The request head: the method line, `host`, then the caller's fields. */
function requestHead(request: RangeGet): string {
  const { url } = request;
  const lines = [`GET ${url.pathname}${url.search} HTTP/1.1`, `host: ${url.host}`];
  for (const [name, value] of Object.entries(request.headers)) {
    if (!isFieldName(name) || !isFieldValue(value)) {
      throw new WeightcastError('USAGE', `${request.what}: the ${name} header has characters HTTP forbids`, {
        file: request.file,
      });
    }
    lines.push(`${name}: ${value}`);
  }
  return `${lines.join('\r\n')}\r\n\r\n`;
}

function hostOf(url: URL): string {
  // An IPv6 literal keeps its brackets in `hostname`; sockets want the bare address.
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

function portOf(url: URL): number {
  return url.port === '' ? 80 : Number(url.port);
}

function phaseTimeoutMs(phase: TimerPhase, options: RangeClientOptions): number {
  if (phase === 'connect') return options.connectTimeoutMs;
  return phase === 'headers' ? options.headersTimeoutMs : options.bodyIdleTimeoutMs;
}

/** A socket the server closed while it sat idle fails before any answer; that is worth a fresh socket. */
function isStaleSocketError(error: unknown, request: RangeGet): boolean {
  if (request.signal?.aborted === true) return false;
  if (!isWeightcastError(error)) return true;
  return error.code === 'ORIGIN_IO' && error.details.retryable === true;
}

/** A pipelined request dropped before its answer began: nothing of it was read, so it may go again. */
function isUnansweredError(error: unknown, request: RangeGet): boolean {
  return request.signal?.aborted !== true && isWeightcastError(error) && error.details.unanswered === true;
}

function unansweredError(request: RangeGet): WeightcastError {
  return new WeightcastError(
    'ORIGIN_IO',
    `${request.what}: the connection closed before the answer to a pipelined request began`,
    { file: request.file, retryable: true, unanswered: true },
  );
}

function timeoutError(phase: TimerPhase, timeoutMs: number, request: RangeGet): WeightcastError {
  const awaited = { connect: 'the connection', headers: 'the response headers', body: 'more of the body' };
  return new WeightcastError(
    'ORIGIN_TIMEOUT',
    `${request.what}: waited ${timeoutMs} ms for ${awaited[phase]}`,
    { file: request.file, timeout: phase, retryable: true },
  );
}

function problemError(problem: ReadProblem, request: RangeGet): WeightcastError {
  const details = { file: request.file, retryable: true };
  switch (problem.kind) {
    case 'head-too-large':
      return new WeightcastError(
        'LIMIT_EXCEEDED',
        `${request.what}: the response head is larger than ${HEAD_BYTES_MAX} bytes`,
        { file: request.file, retryable: false },
      );
    case 'malformed':
      return new WeightcastError(
        'ORIGIN_IO',
        `${request.what}: malformed response (${problem.reason})`,
        details,
      );
    case 'closed-before-head':
      return connectionClosedError(request, 'before the response headers');
    case 'closed-in-body':
      return new WeightcastError(
        'ORIGIN_SHORT_READ',
        `${request.what}: the body ended after ${problem.filled} of ${problem.length} bytes`,
        details,
      );
    case 'unexpected-bytes':
      return new WeightcastError('ORIGIN_IO', `${request.what}: bytes arrived outside a response`, details);
  }
}

function connectionClosedError(request: RangeGet, when: string): WeightcastError {
  return new WeightcastError('ORIGIN_IO', `${request.what}: the connection closed ${when}`, {
    file: request.file,
    retryable: true,
  });
}

function closedError(request: RangeGet): WeightcastError {
  return new WeightcastError('ORIGIN_IO', `${request.what}: the origin was closed`, {
    file: request.file,
    retryable: false,
  });
}
