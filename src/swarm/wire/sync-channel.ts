/**
 * The sync channel: one long-lived connection between an agent and the scheduler per joined model,
 * carrying the same Sync and SyncReply messages as `POST .../sync`, as newline-delimited JSON frames
 * both ways. The agent sends reports, ending notices and urgent pieces as they happen (and an empty
 * sync as its heartbeat); the scheduler pushes assignments and cancellations the moment it makes
 * them. Compared with a long poll plus a short request per report, a frame costs no HTTP request,
 * no response object and no connection bookkeeping: at one or two messages per piece transfer that
 * was a large share of the agents' and the scheduler's CPU.
 *
 * Opening: `GET /v1/swarms/:model/hosts/:id/channel` with `Connection: Upgrade` and
 * `Upgrade: weightcast-sync`; the scheduler answers 101 and the socket carries frames, or answers
 * with the usual JSON error (404 SWARM_UNKNOWN_HOST: register again). A frame the scheduler cannot
 * accept gets an error frame `{"error":{"code","message"}}` and the channel closes.
 */

import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { authHeaders, httpsAgentOf, untrustedCertificate, type ServiceAccess } from '../../auth/transport.js';
import { WeightcastError } from '../../errors.js';
import { remoteError } from './http-json.js';
import { errorBodySchema } from './protocol.js';
import { safeParse } from '../../util/schema.js';

export const CHANNEL_PROTOCOL = 'weightcast-sync';
/** Largest frame either side accepts (a sync reply with the most assignments is far below it). */
export const FRAME_BYTES_MAX = 8 * 1024 * 1024;
const OPEN_TIMEOUT_MS = 10_000;

/** Splits a byte stream into newline-terminated JSON frames, refusing any longer than the limit. */
export class FrameReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly maxBytes = FRAME_BYTES_MAX) {}

  /** Returns the frames completed by `chunk`, parsed; throws SWARM_PROTOCOL on a bad or long frame. */
  push(chunk: Buffer): unknown[] {
    const frames: unknown[] = [];
    let start = 0;
    for (let newline = chunk.indexOf(10); newline >= 0; newline = chunk.indexOf(10, start)) {
      const part = chunk.subarray(start, newline);
      this.grow(part.length);
      const text =
        this.pending.length === 0
          ? part.toString('utf8')
          : Buffer.concat([...this.pending, part]).toString('utf8');
      this.pending = [];
      this.pendingBytes = 0;
      start = newline + 1;
      try {
        frames.push(JSON.parse(text) as unknown);
      } catch {
        throw new WeightcastError('SWARM_PROTOCOL', 'a sync channel frame is not JSON');
      }
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      this.grow(rest.length);
      // Copied: the socket may reuse the chunk's memory.
      this.pending.push(Buffer.from(rest));
    }
    return frames;
  }

  private grow(bytes: number): void {
    this.pendingBytes += bytes;
    if (this.pendingBytes > this.maxBytes) {
      throw new WeightcastError('SWARM_PROTOCOL', `a sync channel frame is over ${this.maxBytes} bytes`);
    }
  }
}

export function encodeFrame(message: unknown): string {
  return JSON.stringify(message) + '\n';
}

/** The frame that tells the other side why the channel is closing. */
export function errorFrame(error: unknown): string {
  const code = error instanceof WeightcastError ? error.code : 'SWARM_PROTOCOL';
  const message = error instanceof Error ? error.message : String(error);
  return encodeFrame({ error: { code, message } });
}

/** A frame that is an error report from the other side, as the error to throw; else undefined. */
export function frameError(frame: unknown, what: string): WeightcastError | undefined {
  if (typeof frame !== 'object' || frame === null || !('error' in frame)) return undefined;
  const parsed = safeParse(errorBodySchema, frame.error);
  if (!parsed.success) return new WeightcastError('SWARM_PROTOCOL', `${what} sent a malformed error frame`);
  return remoteError(parsed.data, what);
}

/**
 * Opens a channel (client side). Resolves with the upgraded socket; rejects with the scheduler's
 * own error (for example SWARM_UNKNOWN_HOST) or SCHEDULER_UNREACHABLE.
 */
export function openChannel(
  url: string,
  signal: AbortSignal,
  access?: ServiceAccess,
): Promise<{ socket: Socket; head: Buffer }> {
  const https = url.startsWith('https:');
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      fn();
    };
    const req = (https ? httpsRequest : request)(url, {
      method: 'GET',
      headers: { ...authHeaders(access), connection: 'Upgrade', upgrade: CHANNEL_PROTOCOL },
      ...(https ? { agent: httpsAgentOf(access) } : {}),
    });
    const unreachable = (reason: string): WeightcastError =>
      new WeightcastError(
        'SCHEDULER_UNREACHABLE',
        `the scheduler at ${url} did not open a channel: ${reason}`,
        {
          url,
        },
      );
    const timer = setTimeout(() => {
      req.destroy();
      settle(() => reject(unreachable(`no answer in ${OPEN_TIMEOUT_MS} ms`)));
    }, OPEN_TIMEOUT_MS);
    const onAbort = (): void => {
      req.destroy();
      settle(() => reject(new WeightcastError('ABORTED', 'opening the sync channel was aborted')));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    req.on('upgrade', (_res, socket, head) => settle(() => resolve({ socket: socket, head })));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let bytes = 0;
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (bytes <= 64 * 1024) chunks.push(chunk);
      });
      res.on('error', (error) => settle(() => reject(unreachable(error.message))));
      res.on('end', () => {
        let error: WeightcastError = new WeightcastError(
          'SWARM_PROTOCOL',
          `the scheduler answered HTTP ${res.statusCode ?? '?'} instead of opening a channel`,
        );
        try {
          const body = safeParse(errorBodySchema, JSON.parse(Buffer.concat(chunks).toString('utf8')));
          if (body.success) error = remoteError(body.data, 'the scheduler', { url });
        } catch {
          // Not JSON: the generic error stands.
        }
        settle(() => reject(error));
      });
    });
    req.on('error', (error) =>
      settle(() => reject(untrustedCertificate(error, url) ?? unreachable(error.message))),
    );
    req.end();
  });
}
