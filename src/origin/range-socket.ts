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
 * it only after a complete response with a trusted length, and idle ones close after a while), the
 * connect, headers and body-silence timeouts, and the caller's AbortSignal, which destroys the
 * socket at once. Failures this module detects are WeightcastErrors whose `details.retryable` marks
 * the transient ones; socket errors (ECONNRESET, ...) pass through with their Node codes for the
 * caller to classify, as undici's do.
 */

import type { IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
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
        if (!stale || attempt === STALE_SOCKET_RETRIES) throw error;
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
    const idle = this.takeIdle();
    if (idle !== undefined) return Promise.resolve(idle);
    if (this.connections.size < this.options.connections) return Promise.resolve(this.open());
    return this.wait(request);
  }

  /** Takes the connection back after an exchange: to the next waiter, to the idle list, or to its end. */
  release(connection: Connection, reusable: boolean): void {
    if (!reusable || !connection.usable || this.closing) {
      connection.destroy();
      return;
    }
    const waiter = this.waiters.shift();
    if (waiter !== undefined) {
      waiter.grant(connection);
      return;
    }
    connection.park(this.options.idleSocketTimeoutMs);
    this.idle.push(connection);
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const waiter of this.waiters.splice(0)) waiter.refuse();
    const connections = [...this.connections];
    for (const connection of connections) connection.shutDown();
    await Promise.all(connections.map((connection) => connection.closed));
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
    const waiter = this.waiters.shift();
    if (waiter !== undefined) waiter.grant(this.open());
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

/** One socket: feeds its reads to a ResponseReader and runs one exchange at a time. */
class Connection {
  // Declared before `socket`: `connect` asks for the first read buffer before it returns.
  private readonly reader = new ResponseReader();
  private readonly socket: Socket;
  private readonly options: RangeClientOptions;
  /** Resolves once the socket has closed. */
  readonly closed: Promise<void>;
  /** Exchanges that finished on this socket; above zero means it was kept alive. */
  completed = 0;
  private connected = false;
  private current: Exchange | undefined;
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
    return this.current === undefined && !this.socket.destroyed && this.reader.idle;
  }

  get heardBack(): boolean {
    return this.reader.heardBack;
  }

  async exchange(request: RangeGet, head: string): Promise<Outcome> {
    assert(this.current === undefined, 'one exchange at a time per connection');
    const { signal } = request;
    throwIfAborted(signal, request.what);
    const onAbort = (): void => this.fail(abortError(signal, request.what));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<Outcome>((resolve, reject) => {
        this.current = { request, resolve, reject };
        this.reader.start({ target: request.target, accepts: request.accepts });
        this.armTimer(this.connected ? 'headers' : 'connect');
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

  /** Destroys the socket because the client is closing; an exchange under way fails for good. */
  shutDown(): void {
    const exchange = this.current;
    this.fail(exchange === undefined ? undefined : closedError(exchange.request));
  }

  private onConnect(): void {
    this.connected = true;
    if (this.current !== undefined) this.armTimer('headers');
  }

  private onRead(count: number): boolean {
    this.apply(this.reader.received(count));
    return true;
  }

  private onEnd(): void {
    const step = this.reader.ended();
    if (step === undefined) this.fail(undefined);
    else this.apply(step);
  }

  private apply(step: ReadStep): void {
    const exchange = this.current;
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
    this.current = undefined;
    this.stopTimer();
    this.completed += 1;
    if (!step.reusable) this.socket.destroy();
    exchange.resolve({ response: step.response, reusable: step.reusable });
  }

  /**
   * Destroys the socket first, so that no later read can land in the caller's target, then fails
   * the exchange under way, if any, with `error` or else a retryable "connection closed".
   */
  private fail(error: unknown): void {
    this.socket.destroy();
    this.stopTimer();
    const exchange = this.current;
    if (exchange === undefined) return;
    this.current = undefined;
    exchange.reject(error ?? connectionClosedError(exchange.request, 'mid-response'));
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
    const exchange = this.current;
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
