/**
 * HttpOrigin reads a model from an HTTP(S) server where file `p` lives at `BASE/p`, which covers
 * plain file servers and a hub's `https://host/org/model/resolve/main/` URLs.
 *
 * Data path: `readInto` sends one ranged GET. For `http:` URLs it goes through RangeClient
 * (range-socket.ts), which has the kernel write the body straight into the caller's buffer; for
 * `https:`, for HEAD and for the small text reads it goes through an undici Agent, whose body chunks
 * are copied into the caller's buffer. Both keep `connections` sockets per host alive. When a body
 * breaks off, the next attempt asks only for the bytes still missing.
 *
 * Around every request: redirects are followed by hand (the bearer token never leaves the base's
 * origin; a hub's per-file CDN target is cached and dropped when it expires), and failures are sorted
 * into transient ones (5xx, 429, timeouts, resets, short bodies), retried with the backoff from
 * retry.ts, and final ones (404, other 4xx, protocol violations), thrown at once. Until the origin
 * has answered once, nothing answering at its address (refused, no such host) is tried only for the
 * first-contact budget, then fails as ORIGIN_UNREACHABLE: a mistyped URL, not an outage to wait out.
 * Every wait, request and body read listens to the caller's AbortSignal.
 */

import type { IncomingHttpHeaders } from 'node:http';
import { setTimeout as sleepMs } from 'node:timers/promises';
import type { Agent, Dispatcher } from 'undici';
import { tlsOnDemand } from '../auth/tls-on-demand.js';
import { untrustedCertificate, type ClientTls } from '../auth/transport.js';
import { WeightcastError, abortError, assert, throwIfAborted } from '../errors.js';
import { INDEX_BYTES_MAX, INDEX_FILE_NAME, indexShardFiles, parseIndexJson } from '../format/index-json.js';
import { assertSafeRelativePath } from '../util/safe-path.js';
import {
  landed,
  type Origin,
  type OriginCallOptions,
  type OriginEntry,
  type OriginStats,
  type ReadProgress,
} from './origin.js';
import { RangeClient } from './range-socket.js';
import {
  DEFAULT_BACKOFF_POLICY,
  RETRY_BUDGET_MS_DEFAULT,
  budgetedDelayMs,
  callBudgetMs,
  isRetryableStatus,
  retryDelayMs,
  type BackoffPolicy,
} from './retry.js';
import { httpUrl } from '../util/http-url.js';

export interface RetryEvent {
  path: string;
  /** 1 for the first retry. */
  attempt: number;
  delayMs: number;
  /** Time since the call's first attempt, and the budget it retries within. */
  elapsedMs: number;
  budgetMs: number;
  reason: string;
  error: WeightcastError;
}

export interface HttpOriginOptions {
  /** Sent as `Authorization: Bearer <token>`, only to the base URL's own origin. */
  token?: string;
  /** For `https:`: the CA to trust instead of the system's, and a client certificate to present. */
  tls?: ClientTls | undefined;
  /** Sockets per host (the base and each redirect target). Default 8. */
  connections?: number;
  /**
   * Ranged reads in flight per socket on the in-place (`http:`) path: above 1, a read that finds
   * every socket busy is written behind the one in flight (HTTP/1.1 pipelining), so its bytes follow
   * with no round trip between. Default 1.
   */
  pipeline?: number;
  /**
   * How long one call keeps retrying transient failures (an outage) before ORIGIN_RETRIES_EXHAUSTED.
   * Default 60 000. Before the origin has answered anything, a call that cannot reach it (refused,
   * no such host) stops at FIRST_CONTACT_BUDGET_MS (retry.ts) instead, with ORIGIN_UNREACHABLE.
   */
  retryBudgetMs?: number;
  /** Retries after the first attempt of each call, at most (the budget usually ends them first). Default 1000. */
  retries?: number;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** The longest `Retry-After` honoured. Default 30 000. */
  retryAfterMaxMs?: number;
  connectTimeoutMs?: number;
  /** Time allowed from sending a request to receiving all response headers. */
  headersTimeoutMs?: number;
  /** Longest silence allowed between two body chunks before the read is abandoned and retried. */
  bodyIdleTimeoutMs?: number;
  /** The model's files when known (from a manifest); then `list` makes no requests. */
  files?: OriginEntry[];
  onRetry?: (event: RetryEvent) => void;
  /** Source of jitter, [0, 1). Default Math.random; tests pass a constant. */
  random?: () => number;
  /**
   * How `readInto` travels: 'auto' (the default) reads `http:` ranges in place with RangeClient,
   * 'undici' sends every request through undici. `https:` always uses undici.
   */
  transport?: 'auto' | 'undici';
}

/** Files next to the weights that loaders want; listed when the server has them. */
export const COMPANION_FILES = [
  'config.json',
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'tokenizer.model',
  'vocab.json',
  'merges.txt',
] as const;

export const SINGLE_FILE_NAME = 'model.safetensors';

const CONNECTIONS_DEFAULT = 8;
const RETRIES_DEFAULT = 1000;
const CONNECT_TIMEOUT_MS_DEFAULT = 10_000;
const HEADERS_TIMEOUT_MS_DEFAULT = 30_000;
const BODY_IDLE_TIMEOUT_MS_DEFAULT = 30_000;
const KEEP_ALIVE_TIMEOUT_MS = 10_000;
/** Below the 5 s keep-alive of Node's HTTP server, so the client, not the server, ends idle sockets. */
const RANGE_IDLE_SOCKET_TIMEOUT_MS = 4_000;
const REDIRECTS_MAX = 5;
/** File URLs an HttpOrigin remembers (fileUrl); past this many the map starts over. */
const FILE_URLS_MAX = 4096;
const REDIRECT_CACHE_ENTRIES_MAX = 4096;
/** Error bodies smaller than this are read to the end so the socket can be reused. */
const DISCARD_BYTES_MAX = 64 * 1024;
const USER_AGENT = 'weightcast';

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** What an expired or revoked signed CDN URL answers; the original URL then issues a fresh one. */
const STALE_TARGET_STATUSES = new Set([403, 404, 410]);
const TIMEOUT_CODES = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
]);
const TRANSIENT_NETWORK_CODES = new Set([
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);
/**
 * Failures that say nothing answered at the address: the name did not resolve (ENOTFOUND, EAI_AGAIN),
 * or no server took the connection (refused, no route). undici and RangeClient's `net.connect` both
 * pass these Node codes through as the error's `code`.
 */
const NO_ANSWER_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

type Body = Dispatcher.ResponseData['body'];

interface ResponseHead {
  status: number;
  headers: IncomingHttpHeaders;
}

interface HopResponse extends ResponseHead {
  /** The unread body; undefined when RangeClient already filled the target or set the body aside. */
  body: Body | undefined;
  /** True when RangeClient wrote the whole range asked into the read's target. */
  bodyFilled: boolean;
}

interface OriginResponse extends HopResponse {
  /** `X-Linked-Size` from any hop: a hub's true file size, sent on its redirect to the CDN. */
  linkedSize: number | undefined;
}

/** What RangeClient needs to write a ranged GET's body in place. */
interface Fill {
  target: Uint8Array;
  accepts: (head: ResponseHead) => boolean;
  onBodyBytes: (count: number) => void;
}

interface Call {
  path: string;
  what: string;
  signal: AbortSignal | undefined;
}

function firstByteLanded(progress: ReadProgress): void {
  progress.firstByteMs = performance.now();
  progress.onFirstByte?.();
}

export class HttpOrigin implements Origin {
  readonly location: string;
  readonly stats: OriginStats = { requests: 0, retries: 0, bytesRead: 0 };
  private readonly base: URL;
  /**
   * undici, for `https:`, HEAD and the small text reads, imported and built on first use: an agent
   * reading pieces over plain http with a manifest never needs it, and its import cost about 0.1 CPU-s.
   */
  private agent: Promise<Agent> | undefined;
  private readonly agentOptions: Agent.Options;
  private readonly connectOptions: { timeout: number };
  private readonly tls: ClientTls | undefined;
  /** Undefined when every request goes through undici. */
  private readonly ranges: RangeClient | undefined;
  private readonly token: string | undefined;
  private readonly connections: number;
  private readonly retries: number;
  private readonly retryBudgetMs: number;
  private readonly policy: BackoffPolicy;
  private readonly files: OriginEntry[] | undefined;
  private readonly onRetry: ((event: RetryEvent) => void) | undefined;
  private readonly random: () => number;
  /** Path to the URL its last redirect chain ended at; insertion order is age order. */
  private readonly redirectTargets = new Map<string, URL>();
  /** Each file's URL under the base, built once (every piece read asks for it twice). */
  private readonly fileUrls = new Map<string, URL>();
  /**
   * Whether any HTTP response (any status) has come from the origin: until one has, a failure to
   * reach its address is a first contact (FIRST_CONTACT_BUDGET_MS), after it an outage.
   */
  private answered = false;

  constructor(baseUrl: string, options: HttpOriginOptions = {}) {
    this.base = parseBaseUrl(baseUrl);
    this.location = this.base.href;
    this.token = options.token === '' ? undefined : options.token;
    this.connections = positiveInteger(options.connections, CONNECTIONS_DEFAULT, 'connections');
    this.retries = Math.max(0, Math.floor(options.retries ?? RETRIES_DEFAULT));
    this.retryBudgetMs = Math.max(0, options.retryBudgetMs ?? RETRY_BUDGET_MS_DEFAULT);
    this.policy = {
      baseMs: options.backoffBaseMs ?? DEFAULT_BACKOFF_POLICY.baseMs,
      maxMs: options.backoffMaxMs ?? DEFAULT_BACKOFF_POLICY.maxMs,
      retryAfterMaxMs: options.retryAfterMaxMs ?? DEFAULT_BACKOFF_POLICY.retryAfterMaxMs,
    };
    this.files = options.files?.map((entry) => checkedEntry(entry, this.location));
    this.onRetry = options.onRetry;
    this.random = options.random ?? Math.random;
    this.agentOptions = {
      connections: this.connections,
      keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
      headersTimeout: options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS_DEFAULT,
      bodyTimeout: options.bodyIdleTimeoutMs ?? BODY_IDLE_TIMEOUT_MS_DEFAULT,
    };
    this.connectOptions = { timeout: options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS_DEFAULT };
    this.tls = options.tls;
    this.ranges =
      options.transport === 'undici'
        ? undefined
        : new RangeClient({
            connections: this.connections,
            connectTimeoutMs: options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS_DEFAULT,
            headersTimeoutMs: options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS_DEFAULT,
            bodyIdleTimeoutMs: options.bodyIdleTimeoutMs ?? BODY_IDLE_TIMEOUT_MS_DEFAULT,
            idleSocketTimeoutMs: RANGE_IDLE_SOCKET_TIMEOUT_MS,
            pipeline: positiveInteger(options.pipeline, 1, 'pipeline'),
          });
  }

  async list(options: OriginCallOptions = {}): Promise<OriginEntry[]> {
    throwIfAborted(options.signal, `listing ${this.location}`);
    if (this.files !== undefined) return sortedByPath(this.files);
    const weights = await this.listWeights(options);
    const companions = await this.mapLimited(COMPANION_FILES, (path) => this.statIfPresent(path, options));
    const byPath = new Map<string, OriginEntry>();
    for (const entry of [...weights, ...companions]) if (entry !== undefined) byPath.set(entry.path, entry);
    return sortedByPath([...byPath.values()]);
  }

  async stat(path: string, options: OriginCallOptions = {}): Promise<OriginEntry> {
    assertSafeRelativePath(path, this.location);
    const call = { path, what: `stat of ${path}`, signal: options.signal };
    const size = await this.withRetries(call, () => this.statOnce(call));
    return { path, size };
  }

  async readInto(
    path: string,
    offset: number,
    target: Uint8Array,
    options: OriginCallOptions = {},
  ): Promise<void> {
    await this.readRange(path, offset, target, options, true);
  }

  async close(): Promise<void> {
    this.redirectTargets.clear();
    await Promise.all([this.agent?.then((agent) => agent.destroy()), this.ranges?.close()]);
  }

  /** `inPlace` lets plain-http reads use RangeClient; the small text reads keep to undici. */
  private async readRange(
    path: string,
    offset: number,
    target: Uint8Array,
    options: OriginCallOptions,
    inPlace: boolean,
  ): Promise<void> {
    assertSafeRelativePath(path, this.location);
    checkReadRange(path, offset, target.length);
    const call = { path, what: `read of ${path}`, signal: options.signal };
    throwIfAborted(call.signal, call.what);
    if (target.length === 0) return;
    // Survives across attempts so a retry after a broken body only asks for the missing tail; a
    // caller's progress object (OriginCallOptions.progress) is that same count.
    const progress = options.progress ?? { filled: 0 };
    progress.filled = 0;
    await this.withRetries(call, () => this.readOnce(call, offset, target, progress, inPlace));
  }

  /** The index with its shards, or the lone `model.safetensors`; one of them must exist. */
  private async listWeights(options: OriginCallOptions): Promise<OriginEntry[]> {
    const index = await this.statIfPresent(INDEX_FILE_NAME, options);
    if (index !== undefined) {
      const shards = indexShardFiles(parseIndexJson(await this.readText(index, options), INDEX_FILE_NAME));
      return [index, ...(await this.mapLimited(shards, (path) => this.stat(path, options)))];
    }
    const single = await this.statIfPresent(SINGLE_FILE_NAME, options);
    if (single !== undefined) return [single];
    throw new WeightcastError(
      'ORIGIN_NO_LISTING',
      `${this.location} has neither ${INDEX_FILE_NAME} nor ${SINGLE_FILE_NAME}, and an HTTP server cannot be ` +
        'listed; pass --manifest with the list of files',
      { file: this.location },
    );
  }

  private async statIfPresent(path: string, options: OriginCallOptions): Promise<OriginEntry | undefined> {
    try {
      return await this.stat(path, options);
    } catch (error) {
      if (error instanceof WeightcastError && error.code === 'ORIGIN_NOT_FOUND') return undefined;
      throw error;
    }
  }

  private async readText(entry: OriginEntry, options: OriginCallOptions): Promise<string> {
    if (entry.size > INDEX_BYTES_MAX) {
      throw new WeightcastError('LIMIT_EXCEEDED', `${entry.path} is larger than ${INDEX_BYTES_MAX} bytes`, {
        file: entry.path,
      });
    }
    const bytes = new Uint8Array(entry.size);
    await this.readRange(entry.path, 0, bytes, options, false);
    return new TextDecoder().decode(bytes);
  }

  /** Runs `task` over `items` with at most `connections` in flight; stops starting new ones on a failure. */
  private async mapLimited<T, R>(items: readonly T[], task: (item: T) => Promise<R>): Promise<R[]> {
    const results: R[] = [];
    let next = 0;
    let failed = false;
    const worker = async (): Promise<void> => {
      while (next < items.length && !failed) {
        const index = next++;
        try {
          results[index] = await task(items[index] as T);
        } catch (error) {
          failed = true;
          throw error;
        }
      }
    };
    const workers = Array.from({ length: Math.min(this.connections, items.length) }, worker);
    await Promise.all(workers);
    return results;
  }

  /** Runs `attempt` until it succeeds, fails for good, or the retry budget (time or count) is spent. */
  private async withRetries<T>(call: Call, attempt: () => Promise<T>): Promise<T> {
    const attempts = this.retries + 1;
    const startedMs = performance.now();
    for (let attemptNumber = 1; attemptNumber <= attempts; attemptNumber++) {
      throwIfAborted(call.signal, call.what);
      try {
        return await attempt();
      } catch (error) {
        const failure = this.asOriginError(error, call);
        // Asked at each failure: another call may have had the origin's first answer meanwhile.
        const firstContact = !this.answered && NO_ANSWER_CODES.has(String(failure.details.cause));
        if (failure.details.retryable !== true && !firstContact) throw failure;
        const elapsedMs = performance.now() - startedMs;
        const budgetMs = callBudgetMs(this.retryBudgetMs, firstContact);
        const delayMs = budgetedDelayMs(this.retryDelay(attemptNumber, failure), elapsedMs, budgetMs);
        if (attemptNumber === attempts || delayMs === undefined) {
          const tried = { file: call.path, attempts: attemptNumber, elapsedMs: Math.round(elapsedMs) };
          if (firstContact) throw this.unreachableError(failure, tried);
          throw new WeightcastError(
            'ORIGIN_RETRIES_EXHAUSTED',
            `${call.what} from ${this.location} failed ${attemptNumber} times in ${(elapsedMs / 1000).toFixed(1)} s ` +
              `(retry budget ${(this.retryBudgetMs / 1000).toFixed(0)} s); last: ${failure.message}`,
            tried,
            { cause: failure },
          );
        }
        await this.backOff(call, attemptNumber, failure, delayMs, { elapsedMs, budgetMs });
      }
    }
    assert(false, 'the retry loop returns or throws on its last attempt');
  }

  /** Nothing has ever answered at the base URL's address: most likely a wrong host or port. */
  private unreachableError(
    failure: WeightcastError,
    tried: { file: string; attempts: number; elapsedMs: number },
  ): WeightcastError {
    const tries = `${tried.attempts} ${tried.attempts === 1 ? 'try' : 'tries'}`;
    return new WeightcastError(
      'ORIGIN_UNREACHABLE',
      `nothing answered at ${this.location} (${tries} in ${(tried.elapsedMs / 1000).toFixed(1)} s; last: ` +
        `${failure.message}): check the URL's host and port`,
      { ...tried, cause: failure.details.cause },
      { cause: failure },
    );
  }

  private retryDelay(attempt: number, error: WeightcastError): number {
    const retryAfter = typeof error.details.retryAfter === 'string' ? error.details.retryAfter : undefined;
    return retryDelayMs({ attempt, retryAfter, random: this.random(), nowMs: Date.now() }, this.policy);
  }

  private async backOff(
    call: Call,
    attempt: number,
    error: WeightcastError,
    delayMs: number,
    waited: { elapsedMs: number; budgetMs: number },
  ): Promise<void> {
    this.stats.retries += 1;
    this.onRetry?.({
      path: call.path,
      attempt,
      delayMs,
      elapsedMs: waited.elapsedMs,
      budgetMs: waited.budgetMs,
      reason: error.message,
      error,
    });
    if (delayMs <= 0) return;
    try {
      await sleepMs(delayMs, undefined, call.signal === undefined ? {} : { signal: call.signal });
    } catch {
      // The timer rejects only when the signal fires.
      throw abortError(call.signal, call.what);
    }
  }

  private async statOnce(call: Call): Promise<number> {
    const response = await this.send(call, 'HEAD', {}, undefined);
    await discard(response.body);
    const headRefused = response.status === 405 || response.status === 501;
    if (!headRefused && !isSuccess(response.status))
      throw statusError(call.path, this.shownUrl(call.path), response);
    if (response.linkedSize !== undefined) return response.linkedSize;
    const size = headRefused ? undefined : headerInteger(response.headers['content-length']);
    return size ?? this.statByRange(call);
  }

  /** For servers that refuse HEAD or omit its length: the total in `Content-Range` of a 1-byte GET. */
  private async statByRange(call: Call): Promise<number> {
    const response = await this.send(call, 'GET', { range: 'bytes=0-0' }, undefined);
    const size = sizeFromRangeProbe(response);
    if (response.status === 200) response.body?.destroy();
    else await discard(response.body);
    if (size !== undefined) return size;
    if (isSuccess(response.status)) {
      throw new WeightcastError('ORIGIN_RANGE_UNSUPPORTED', `${call.path}: the server reports no file size`, {
        file: call.path,
      });
    }
    throw statusError(call.path, this.shownUrl(call.path), response);
  }

  private async readOnce(
    call: Call,
    offset: number,
    target: Uint8Array,
    progress: ReadProgress,
    inPlace: boolean,
  ): Promise<void> {
    const start = offset + progress.filled;
    const end = offset + target.length - 1;
    const fill =
      inPlace && this.ranges !== undefined ? this.fillFor(call, target, progress, start, end) : undefined;
    const response = await this.send(call, 'GET', { range: `bytes=${start}-${end}` }, fill);
    if (response.bodyFilled) return;
    const problem = rangeResponseProblem(call.path, response, start, end, () => this.shownUrl(call.path));
    if (problem !== undefined) {
      // A wrong success body may be the whole file: cut the connection rather than read it.
      if (isSuccess(response.status)) response.body?.destroy();
      else await discard(response.body);
      throw problem;
    }
    assert(response.body !== undefined, 'an acceptable body is either filled or left unread');
    await this.receiveBody(call, response.body, target, progress);
  }

  /** The rest of `target` for RangeClient, which counts each byte it writes as progress. */
  private fillFor(call: Call, target: Uint8Array, progress: ReadProgress, start: number, end: number): Fill {
    return {
      target: target.subarray(progress.filled),
      accepts: (head) => {
        // Called once a response head is in, before its body: the origin has answered.
        this.answered = true;
        return rangeResponseProblem(call.path, head, start, end) === undefined;
      },
      onBodyBytes: (count) => {
        if (progress.firstByteMs === undefined) firstByteLanded(progress);
        landed(progress, count);
        this.stats.bytesRead += count;
      },
    };
  }

  private async receiveBody(
    call: Call,
    body: Body,
    target: Uint8Array,
    progress: ReadProgress,
  ): Promise<void> {
    try {
      for await (const chunk of body as AsyncIterable<Buffer>) {
        if (progress.filled + chunk.length > target.length) {
          const message = `${call.path}: the server sent more bytes than asked`;
          throw new WeightcastError('ORIGIN_RANGE_UNSUPPORTED', message, { file: call.path });
        }
        target.set(chunk, progress.filled);
        if (progress.firstByteMs === undefined) firstByteLanded(progress);
        landed(progress, chunk.length);
        this.stats.bytesRead += chunk.length;
      }
    } catch (error) {
      body.destroy();
      throw this.asOriginError(error, call);
    }
    if (progress.filled < target.length) {
      throw new WeightcastError(
        'ORIGIN_SHORT_READ',
        `${call.path}: the body ended after ${progress.filled} of ${target.length} bytes`,
        { file: call.path, retryable: true },
      );
    }
  }

  /**
   * Sends one logical request: from the cached redirect target when there is one (falling back to
   * the original URL once if that target has expired), else from the original URL.
   */
  private async send(
    call: Call,
    method: 'GET' | 'HEAD',
    headers: Record<string, string>,
    fill: Fill | undefined,
  ): Promise<OriginResponse> {
    const cached = this.redirectTargets.get(call.path);
    if (cached !== undefined) {
      const response = await this.follow(call, cached, method, headers, fill);
      if (!STALE_TARGET_STATUSES.has(response.status)) return response;
      await discard(response.body);
      this.redirectTargets.delete(call.path);
    }
    return this.follow(call, this.fileUrl(call.path), method, headers, fill);
  }

  private async follow(
    call: Call,
    start: URL,
    method: 'GET' | 'HEAD',
    headers: Record<string, string>,
    fill: Fill | undefined,
  ): Promise<OriginResponse> {
    let url = start;
    let linkedSize: number | undefined;
    for (let redirects = 0; redirects <= REDIRECTS_MAX; redirects++) {
      const response = await this.request(call, url, method, headers, fill);
      linkedSize ??= headerInteger(response.headers['x-linked-size']);
      if (!REDIRECT_STATUSES.has(response.status)) {
        const moved = url.href !== this.fileUrl(call.path).href;
        if (moved && response.status < 400) this.rememberTarget(call.path, url);
        return { ...response, linkedSize };
      }
      await discard(response.body);
      url = redirectTarget(call.path, url, response.headers.location);
    }
    throw new WeightcastError(
      'ORIGIN_TOO_MANY_REDIRECTS',
      `${call.path}: more than ${REDIRECTS_MAX} redirects (last to ${url.href})`,
      { file: call.path },
    );
  }

  private async request(
    call: Call,
    url: URL,
    method: 'GET' | 'HEAD',
    headers: Record<string, string>,
    fill: Fill | undefined,
  ): Promise<HopResponse> {
    this.stats.requests += 1;
    const sent: Record<string, string> = { 'user-agent': USER_AGENT, ...headers };
    // The token belongs to the base's origin; a CDN or any other host a redirect names never sees it.
    if (this.token !== undefined && url.origin === this.base.origin)
      sent.authorization = `Bearer ${this.token}`;
    try {
      if (fill !== undefined && this.ranges !== undefined && url.protocol === 'http:') {
        assert(method === 'GET', 'only ranged GETs are filled in place');
        const response = await this.requestInPlace(this.ranges, call, url, sent, fill);
        if (response !== undefined) return response;
        this.stats.requests += 1;
      }
      const agent = await this.undiciAgent();
      const response = await agent.request({
        origin: url.origin,
        path: url.pathname + url.search,
        method,
        headers: sent,
        signal: call.signal ?? null,
      });
      this.answered = true;
      return {
        status: response.statusCode,
        headers: response.headers,
        body: response.body,
        bodyFilled: false,
      };
    } catch (error) {
      throw this.asOriginError(error, call);
    }
  }

  private undiciAgent(): Promise<Agent> {
    this.agent ??= import('undici').then(
      ({ Agent, buildConnector }) =>
        new Agent({
          ...this.agentOptions,
          connect: tlsOnDemand(buildConnector, this.connectOptions, this.tls),
        }),
    );
    return this.agent;
  }

  /**
   * One ranged GET through RangeClient. Undefined when the server framed an acceptable range in a
   * way RangeClient does not read (chunked, or no length): then undici asks again.
   */
  private async requestInPlace(
    ranges: RangeClient,
    call: Call,
    url: URL,
    headers: Record<string, string>,
    fill: Fill,
  ): Promise<HopResponse | undefined> {
    const request = { ...fill, url, headers, signal: call.signal, what: call.what, file: call.path };
    const response = await ranges.get(request);
    if (!response.bodyFilled && fill.accepts(response)) return undefined;
    return { ...response, body: undefined };
  }

  private rememberTarget(path: string, url: URL): void {
    this.redirectTargets.delete(path);
    this.redirectTargets.set(path, url);
    const oldest = this.redirectTargets.keys().next();
    if (this.redirectTargets.size > REDIRECT_CACHE_ENTRIES_MAX && oldest.done !== true) {
      this.redirectTargets.delete(oldest.value);
    }
  }

  /** A file's URL as errors show it: no query string (it may hold a signature), no credentials. */
  private shownUrl(path: string): string {
    const url = this.fileUrl(path);
    return `${url.origin}${url.pathname}`;
  }

  private fileUrl(path: string): URL {
    let url = this.fileUrls.get(path);
    if (url === undefined) {
      url = new URL(path.split('/').map(encodeURIComponent).join('/'), this.base);
      // A model has few files, but the paths come from callers: keep the map bounded anyway.
      if (this.fileUrls.size >= FILE_URLS_MAX) this.fileUrls.clear();
      this.fileUrls.set(path, url);
    }
    return url;
  }

  /** Every failure leaves as a WeightcastError; `details.retryable` marks the transient ones. */
  private asOriginError(error: unknown, call: Call): WeightcastError {
    if (call.signal?.aborted === true) return abortError(call.signal, call.what);
    if (error instanceof WeightcastError) return error;
    const rawCode = (error as { code?: unknown } | undefined)?.code;
    const code = typeof rawCode === 'string' ? rawCode : '';
    const message = error instanceof Error ? error.message : String(error);
    const details = { file: call.path, cause: code };
    if (TIMEOUT_CODES.has(code)) {
      return new WeightcastError(
        'ORIGIN_TIMEOUT',
        `${call.what}: ${message}`,
        { ...details, retryable: true },
        { cause: error },
      );
    }
    // A certificate no trusted CA signed will not be trusted on a retry: say what to configure.
    const untrusted = untrustedCertificate(error, this.location);
    if (untrusted !== undefined) return untrusted;
    const retryable = TRANSIENT_NETWORK_CODES.has(code) || code.startsWith('HPE_');
    return new WeightcastError(
      'ORIGIN_IO',
      `${call.what}: ${message}`,
      { ...details, retryable },
      { cause: error },
    );
  }
}

function parseBaseUrl(baseUrl: string): URL {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch (error) {
    throw new WeightcastError('ORIGIN_UNSUPPORTED', `not a URL: ${baseUrl}`, {}, { cause: error });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new WeightcastError('ORIGIN_UNSUPPORTED', `HttpOrigin needs an http(s) URL, got ${url.protocol}`);
  }
  url.username = '';
  url.password = '';
  url.hash = '';
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

function redirectTarget(path: string, from: URL, location: string | string[] | undefined): URL {
  const text = Array.isArray(location) ? location[0] : location;
  const url = text === undefined ? undefined : httpUrl(text, from);
  if (url === undefined) {
    throw new WeightcastError('ORIGIN_HTTP_STATUS', `${path}: redirect with a missing or unusable Location`, {
      file: path,
      location: text,
    });
  }
  return url;
}

/** Why a response to `Range: bytes=start-end` cannot be used, or undefined when it can. */
function rangeResponseProblem(
  path: string,
  response: ResponseHead,
  start: number,
  end: number,
  /** The file's URL for a status error's message (built only then). */
  shownUrl: () => string = () => path,
): WeightcastError | undefined {
  const length = end - start + 1;
  const contentLength = headerInteger(response.headers['content-length']);
  if (response.status === 206) {
    const range = parseContentRange(response.headers['content-range']);
    if (range?.start === start && range.end === end && (contentLength ?? length) === length) return undefined;
    // The file ends inside the range: it is shorter than the caller (the manifest) says.
    const endsEarly = range?.end !== undefined && range.end < end && range.size === range.end + 1;
    if (range?.start === start && endsEarly) {
      return new WeightcastError(
        'ORIGIN_SHORT_READ',
        `${path}: the file ends at byte ${String(range.size)}, before the end of bytes ${start}-${end} (is it shorter than the manifest says?)`,
        { file: path, offset: start, length },
      );
    }
    return new WeightcastError(
      'ORIGIN_RANGE_UNSUPPORTED',
      `${path}: asked for bytes ${start}-${end}, got Content-Range ${String(response.headers['content-range'])}`,
      { file: path },
    );
  }
  if (response.status === 200) {
    // A server that ignores Range sends the whole file; usable only when that is exactly what we asked.
    if (start === 0 && contentLength === length) return undefined;
    return new WeightcastError('ORIGIN_RANGE_UNSUPPORTED', `${path}: the server ignored the Range header`, {
      file: path,
    });
  }
  if (response.status === 416) {
    const size = parseContentRange(response.headers['content-range'])?.size;
    return new WeightcastError(
      'ORIGIN_SHORT_READ',
      `${path}: bytes ${start}-${end} lie beyond the end of the file (size ${size ?? 'unknown'})`,
      { file: path, offset: start, length },
    );
  }
  return statusError(path, shownUrl(), response);
}

function sizeFromRangeProbe(response: OriginResponse): number | undefined {
  if (response.status === 206 || response.status === 416) {
    return response.linkedSize ?? parseContentRange(response.headers['content-range'])?.size;
  }
  if (response.status === 200)
    return response.linkedSize ?? headerInteger(response.headers['content-length']);
  return undefined;
}

function isSuccess(status: number): boolean {
  return status >= 200 && status <= 299;
}

/** `shownUrl`: the file's URL, named in the message so a wrong origin URL shows at once. */
function statusError(path: string, shownUrl: string, response: ResponseHead): WeightcastError {
  const status = response.status;
  if (status === 404 || status === 410) {
    return new WeightcastError('ORIGIN_NOT_FOUND', `${shownUrl}: not found (HTTP ${status})`, {
      file: path,
      status,
    });
  }
  const retryAfter = headerText(response.headers['retry-after']);
  const hint = status === 401 || status === 403 ? ' (check --token, WEIGHTCAST_TOKEN or HF_TOKEN)' : '';
  return new WeightcastError('ORIGIN_HTTP_STATUS', `${shownUrl}: HTTP ${status}${hint}`, {
    file: path,
    status,
    retryable: isRetryableStatus(status),
    ...(retryAfter === undefined ? {} : { retryAfter }),
  });
}

interface ContentRange {
  start: number | undefined;
  end: number | undefined;
  size: number | undefined;
}

/** `bytes 0-99/1000`, `bytes 0-99/*` or `bytes *\/1000`. */
export function parseContentRange(value: string | string[] | undefined): ContentRange | undefined {
  const text = headerText(value);
  const match = text === undefined ? null : /^bytes\s+(?:(\d+)-(\d+)|\*)\/(\d+|\*)$/i.exec(text.trim());
  if (match === null) return undefined;
  const toNumber = (part: string | undefined): number | undefined =>
    part === undefined || part === '*' ? undefined : safeInteger(part);
  return { start: toNumber(match[1]), end: toNumber(match[2]), size: toNumber(match[3]) };
}

function headerText(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function headerInteger(value: string | string[] | undefined): number | undefined {
  const text = headerText(value)?.trim();
  return text !== undefined && /^\d+$/.test(text) ? safeInteger(text) : undefined;
}

function safeInteger(text: string): number | undefined {
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : undefined;
}

/**
 * Reads a small leftover body to its end so the connection can be reused; a large one closes it.
 * RangeClient's responses have no body left to read.
 */
async function discard(body: Body | undefined): Promise<void> {
  if (body === undefined) return;
  try {
    await body.dump({ limit: DISCARD_BYTES_MAX });
  } catch {
    body.destroy();
  }
}

function checkReadRange(path: string, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(offset + length)) {
    throw new WeightcastError('ORIGIN_IO', `${path}: invalid read offset ${offset}`, { file: path, offset });
  }
}

function checkedEntry(entry: OriginEntry, location: string): OriginEntry {
  assertSafeRelativePath(entry.path, location);
  if (!Number.isSafeInteger(entry.size) || entry.size < 0) {
    throw new WeightcastError('ORIGIN_IO', `${entry.path}: invalid size ${entry.size}`, { file: entry.path });
  }
  return { path: entry.path, size: entry.size };
}

function sortedByPath(entries: OriginEntry[]): OriginEntry[] {
  return [...entries].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new WeightcastError('USAGE', `${name} must be a positive integer, got ${value}`);
  }
  return value;
}
