/**
 * The few HTTP helpers the scheduler and agents share: read a JSON body under a size limit, answer
 * with JSON or a typed error body `{code, message}`, and call a JSON endpoint with a timeout.
 *
 * Calls go through node:http, which the agent and the scheduler load anyway for their servers:
 * undici took about 0.1 CPU-s to import, on the path from an agent's launch to its first piece.
 */

import {
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import { request as httpsRequest } from 'node:https';
import { authHeaders, httpsAgentOf, untrustedCertificate, type ServiceAccess } from '../../auth/transport.js';
import type { Role } from '../../auth/gate.js';
import { WeightcastError, errorEntry, isErrorCode, isWeightcastError, type ErrorCode } from '../../errors.js';
import { takeBodyBytes } from '../../util/server-limits.js';
import { JSON_BODY_BYTES_MAX } from './limits.js';

/**
 * A handler for a group of routes that a server mounts under a prefix and hands the whole request
 * (the scheduler mounts the seed catalog's `/v1/catalog`); it answers every request, errors included.
 */
export type HttpRoutes = (req: IncomingMessage, res: ServerResponse, role: Role) => Promise<void>;

/**
 * Reads a request body of at most `maxBytes` bytes (LIMIT_EXCEEDED beyond, declared or not). On a
 * server's request the bytes come out of the server's body budget first (SERVER_BUSY when it is
 * full): the declared length at once, the bytes of a chunked body as they arrive.
 */
export async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? '0');
  if (declared > maxBytes) throw new WeightcastError('LIMIT_EXCEEDED', `request body over ${maxBytes} bytes`);
  takeBodyBytes(req, declared);
  // A declared body is read into one buffer of its size: no second copy to join chunks.
  const whole = declared > 0 ? Buffer.allocUnsafe(declared) : undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    if (whole !== undefined && size + chunk.length <= declared) whole.set(chunk, size);
    else chunks.push(chunk);
    size += chunk.length;
    if (size > maxBytes) throw new WeightcastError('LIMIT_EXCEEDED', `request body over ${maxBytes} bytes`);
    if (size > declared) takeBodyBytes(req, Math.min(chunk.length, size - declared));
  }
  if (whole !== undefined && chunks.length === 0) return whole.subarray(0, size);
  return Buffer.concat(
    whole === undefined ? chunks : [whole.subarray(0, Math.min(size, declared)), ...chunks],
    size,
  );
}

export async function readJsonBody(req: IncomingMessage, maxBytes = JSON_BODY_BYTES_MAX): Promise<unknown> {
  const body = await readBody(req, maxBytes);
  if (body.length === 0) return {};
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    throw new WeightcastError('SWARM_PROTOCOL', 'request body is not valid JSON');
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const bytes = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length });
  res.end(bytes);
}

/** HTTP status for an error code a server answers with (the error catalogue's). */
export function statusOf(code: ErrorCode): number {
  return errorEntry(code).status;
}

/**
 * Answers with the error's code and message under the status `statusFor` gives (statusOf unless a
 * tier has its own table); a response already under way can only be cut off.
 */
export function sendError(res: ServerResponse, error: unknown, statusFor = statusOf): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  // A body left unread (refused for its size, or the budget) is not read on: the connection goes.
  if (!res.req.complete) res.setHeader('connection', 'close');
  if (isWeightcastError(error)) {
    const status = statusFor(error.code);
    if (status === 503) res.setHeader('retry-after', '1');
    if (status === 401) res.setHeader('www-authenticate', 'Bearer');
    sendJson(res, status, { code: error.code, message: error.message });
    return;
  }
  sendJson(res, 500, { code: 'INTERNAL', message: (error as Error)?.message ?? String(error) });
}

/** Connections kept open between calls, so a member's calls to its scheduler reuse one. */
const HTTP_AGENT = new HttpAgent({ keepAlive: true });

export interface CallOptions {
  method?: 'GET' | 'POST' | 'DELETE';
  body?: unknown;
  timeoutMs: number;
  signal?: AbortSignal;
  /** The credential and TLS settings for the service called. */
  access?: ServiceAccess | undefined;
}

/**
 * Calls a JSON endpoint. Network failures become SCHEDULER_UNREACHABLE (`what` names the peer);
 * an error answer becomes a WeightcastError with the code the server sent, when it is one of ours.
 */
export async function callJson(url: string, what: string, options: CallOptions): Promise<unknown> {
  const timeout = AbortSignal.timeout(options.timeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
  let response;
  try {
    response = await send(url, options.method ?? 'GET', options.body, signal, options.access);
  } catch (error) {
    if (options.signal?.aborted === true)
      throw new WeightcastError('ABORTED', `${what}: aborted`, {}, { cause: error });
    const untrusted = untrustedCertificate(error, url);
    if (untrusted !== undefined) throw untrusted;
    throw new WeightcastError(
      'SCHEDULER_UNREACHABLE',
      `${what} at ${url} did not answer: ${(error as Error).message}`,
      { url },
      { cause: error },
    );
  }
  let text: string;
  try {
    text = (await readBody(response, JSON_BODY_BYTES_MAX)).toString('utf8');
  } catch (error) {
    if (isWeightcastError(error, 'LIMIT_EXCEEDED')) {
      throw new WeightcastError(
        'LIMIT_EXCEEDED',
        `${what} at ${url} answered with over ${JSON_BODY_BYTES_MAX} bytes`,
        {
          url,
        },
      );
    }
    if (options.signal?.aborted === true)
      throw new WeightcastError('ABORTED', `${what}: aborted`, {}, { cause: error });
    throw new WeightcastError(
      'SCHEDULER_UNREACHABLE',
      `${what} at ${url} broke off: ${(error as Error).message}`,
      {
        url,
      },
    );
  }
  const status = response.statusCode ?? 0;
  let parsed: unknown = undefined;
  if (text.length > 0) {
    try {
      parsed = JSON.parse(text) as unknown;
    } catch {
      throw new WeightcastError('SWARM_PROTOCOL', `${what} at ${url} answered ${status} with non-JSON`, {
        url,
        status,
        foreign: true,
      });
    }
  }
  if (status >= 200 && status < 300) return parsed;
  // Checked by hand, not with the message schemas: a pull through an agent loads this module, and
  // the schema library cost it more to load than everything else it runs.
  const body = parsed as { code?: unknown; message?: unknown } | null | undefined;
  const code = body?.code;
  const message = body?.message;
  if (typeof code === 'string' && typeof message === 'string' && isRemoteCode(code)) {
    throw remoteError({ code, message }, what, { url, status });
  }
  // `foreign`: not an answer of ours at all (no JSON, or JSON without our error shape).
  throw new WeightcastError('SWARM_PROTOCOL', `${what} at ${url} answered HTTP ${status}`, {
    url,
    status,
    foreign: true,
  });
}

/** Sends one request (a JSON body when given) and resolves with the response once its head is in. */
async function send(
  url: string,
  method: string,
  body: unknown,
  signal: AbortSignal,
  access: ServiceAccess | undefined,
): Promise<IncomingMessage> {
  const target = new URL(url);
  const https = target.protocol === 'https:';
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise<IncomingMessage>((resolve, reject) => {
    const request = (https ? httpsRequest : httpRequest)(target, {
      method,
      signal,
      agent: https ? httpsAgentOf(access) : HTTP_AGENT,
      headers: {
        ...authHeaders(access),
        ...(payload === undefined
          ? {}
          : { 'content-type': 'application/json', 'content-length': payload.length }),
      },
    });
    request.once('response', resolve);
    request.once('error', reject);
    request.end(payload);
  });
}

/**
 * An error another process sent us (`{code, message}`), as ours: codes we know keep their meaning,
 * anything else is a protocol error (a peer cannot make us act on codes we never defined).
 */
export function remoteError(
  body: { code: string; message: string },
  what: string,
  context: Record<string, unknown> = {},
): WeightcastError {
  if (!isRemoteCode(body.code)) {
    return new WeightcastError(
      'SWARM_PROTOCOL',
      `${what} failed with unknown code ${body.code}: ${body.message}`,
      context,
    );
  }
  return new WeightcastError(body.code, `${what}: ${body.message}`, context);
}

/** Codes another process may send us: the catalogue's `remote` ones (anything else is a protocol error). */
function isRemoteCode(code: string): code is ErrorCode {
  return isErrorCode(code) && errorEntry(code).remote === true;
}
