/**
 * The limits every HTTP server of weightcast keeps, applied in one place: the scheduler (with the
 * seed catalog's routes), the agent (peer API, local API, the seed node's routes) and the origin
 * file server all create their servers here.
 *
 * - Time: a request's head must arrive within `headersTimeoutMs` and the whole request (head and
 *   body) within `requestTimeoutMs` (408, then the connection closes); a kept-alive connection idle
 *   for `keepAliveTimeoutMs` is closed; a socket on which nothing moves either way for
 *   `socketIdleMs` is destroyed (a reader that stopped reading a response).
 * - Connections: at most `connectionsPerAddressMax` open connections per client address; the next
 *   one is answered 503 SERVER_BUSY and closed, so one address holding thousands of slow
 *   connections cannot take the file descriptors every other client needs.
 * - Memory: request bodies are read into memory only under a `BodyBudget`, one per process unless a
 *   server is given its own: a request takes its declared length (or each chunk of a chunked body)
 *   from the budget before the bytes are buffered and gives it back when its response is done. A
 *   body larger than the whole budget is 413 LIMIT_EXCEEDED; one that does not fit now is 503
 *   SERVER_BUSY with Retry-After.
 */

import {
  createServer,
  type IncomingMessage,
  type RequestListener,
  type Server,
  type ServerOptions,
  type ServerResponse,
} from 'node:http';
import { Server as TlsServer } from 'node:tls';
import type { Socket } from 'node:net';
import { WeightcastError } from '../errors.js';
import { BODY_BUFFER_BYTES_DEFAULT, SERVER_LIMIT_DEFAULTS } from './server-limit-defaults.js';

export interface ServerLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  socketIdleMs: number;
  connectionsPerAddressMax: number;
  /** Request-body bytes buffered at once; default: the process's budget. */
  bodyBudget: BodyBudget;
}

export { BODY_BUFFER_BYTES_DEFAULT, SERVER_LIMIT_DEFAULTS } from './server-limit-defaults.js';

/** Longest wait before Node looks at a request's clock: a check every half timeout, 50 ms to 30 s. */
const CHECK_INTERVAL_MS_MAX = 30_000;
const CHECK_INTERVAL_MS_MIN = 50;

/** A count of bytes taken and given back, never above `bytesMax`. */
export class BodyBudget {
  private used = 0;
  private peak = 0;

  constructor(readonly bytesMax: number) {
    if (!(Number.isSafeInteger(bytesMax) && bytesMax > 0)) {
      throw new WeightcastError('USAGE', `a body budget must be a positive number of bytes, got ${bytesMax}`);
    }
  }

  get inUseBytes(): number {
    return this.used;
  }

  /** The most ever in use at once (for tests and status). */
  get peakBytes(): number {
    return this.peak;
  }

  tryTake(bytes: number): boolean {
    if (this.used + bytes > this.bytesMax) return false;
    this.used += bytes;
    this.peak = Math.max(this.peak, this.used);
    return true;
  }

  give(bytes: number): void {
    this.used -= bytes;
  }
}

let processBudget: BodyBudget | undefined;

/** The budget every server of this process shares unless it is given its own. */
export function processBodyBudget(): BodyBudget {
  processBudget ??= new BodyBudget(BODY_BUFFER_BYTES_DEFAULT);
  return processBudget;
}

/** What one request has taken from its server's budget; all of it goes back when its response ends. */
class BodyLease {
  private held = 0;

  constructor(private readonly budget: BodyBudget) {}

  get budgetBytesMax(): number {
    return this.budget.bytesMax;
  }

  take(bytes: number): boolean {
    if (!this.budget.tryTake(bytes)) return false;
    this.held += bytes;
    return true;
  }

  release(): void {
    this.budget.give(this.held);
    this.held = 0;
  }
}

const leases = new WeakMap<IncomingMessage, BodyLease>();
const refused = new WeakSet<Socket>();

/**
 * Takes `bytes` of a request's body from its server's budget before they are buffered (a request
 * not made through `createLimitedServer`, such as a response a client reads, is not counted).
 */
export function takeBodyBytes(req: IncomingMessage, bytes: number): void {
  const lease = leases.get(req);
  if (lease === undefined || bytes === 0) return;
  if (bytes > lease.budgetBytesMax) {
    throw new WeightcastError(
      'LIMIT_EXCEEDED',
      `a request body of ${bytes} bytes is over this server's body buffer (${lease.budgetBytesMax} bytes)`,
    );
  }
  if (!lease.take(bytes)) {
    throw new WeightcastError(
      'SERVER_BUSY',
      `request bodies already fill this server's body buffer (${lease.budgetBytesMax} bytes); try again`,
    );
  }
}

/** Limits from defaults and overrides, with Node's rules applied (see below). */
export function resolveLimits(
  overrides: Partial<ServerLimits> = {},
  defaults: Partial<Omit<ServerLimits, 'bodyBudget'>> = {},
): ServerLimits {
  const merged = { ...SERVER_LIMIT_DEFAULTS, ...defaults, ...definedOnly(overrides) };
  for (const [name, value] of Object.entries(merged)) {
    if (!(Number.isSafeInteger(value) && value > 0)) {
      throw new WeightcastError('USAGE', `server limit ${name} must be a positive integer, got ${value}`);
    }
  }
  return {
    ...merged,
    // Node 20 stops timing requests out at all when headersTimeout is above requestTimeout.
    headersTimeoutMs: Math.min(merged.headersTimeoutMs, merged.requestTimeoutMs),
    bodyBudget: overrides.bodyBudget ?? processBodyBudget(),
  };
}

function definedOnly(overrides: Partial<ServerLimits>): Partial<Omit<ServerLimits, 'bodyBudget'>> {
  return Object.fromEntries(
    Object.entries(overrides).filter(([name, value]) => name !== 'bodyBudget' && value !== undefined),
  );
}

export interface LimitedServerOptions {
  noDelay?: boolean;
  /** Makes the server from Node's options (an HTTPS one, say); default node:http's createServer. */
  create?: (options: ServerOptions, listener: RequestListener) => Server;
}

/** An HTTP server with `limits` applied; `handler` answers every request that gets through. */
export function createLimitedServer(
  limits: ServerLimits,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  options: LimitedServerOptions = {},
): Server {
  const create = options.create ?? ((serverOptions, listener) => createServer(serverOptions, listener));
  const server = create(
    {
      requestTimeout: limits.requestTimeoutMs,
      headersTimeout: limits.headersTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.min(
        CHECK_INTERVAL_MS_MAX,
        Math.max(CHECK_INTERVAL_MS_MIN, Math.floor(limits.headersTimeoutMs / 2)),
      ),
      ...(options.noDelay === true ? { noDelay: true } : {}),
    },
    (req, res) => {
      // A connection over the cap was answered already; a request it sent anyway is not served.
      if (refused.has(req.socket)) return;
      const lease = new BodyLease(limits.bodyBudget);
      leases.set(req, lease);
      res.once('close', () => lease.release());
      handler(req, res);
    },
  );
  // Both are also set here: Node 20 takes them from the options only on some versions.
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.timeout = limits.socketIdleMs;
  capConnectionsPerAddress(server, limits.connectionsPerAddressMax);
  return server;
}

function capConnectionsPerAddress(server: Server, perAddressMax: number): void {
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? 'unknown';
    const count = open.get(address) ?? 0;
    if (count >= perAddressMax) {
      // Over TLS no HTTP answer can be sent before the handshake: the connection is just closed.
      if (server instanceof TlsServer) socket.destroy();
      else refuse(socket, `${address} already has ${perAddressMax} connections open to this server`);
      return;
    }
    open.set(address, count + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left <= 0) open.delete(address);
      else open.set(address, left);
    });
  });
}

/** Answers a connection over the cap with 503 SERVER_BUSY and closes it once that is sent. */
function refuse(socket: Socket, message: string): void {
  refused.add(socket);
  const body = JSON.stringify({ code: 'SERVER_BUSY', message });
  socket.on('error', () => socket.destroy());
  socket.end(
    'HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n' +
      `connection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  socket.destroySoon();
}
