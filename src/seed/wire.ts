/**
 * What crosses a socket in the seed tier: the catalog's and the seed nodes' messages with their zod
 * schemas and limits, and the HTTP helpers both sides share (typed error answers with a status per
 * code, a JSON and raw-bytes client that turns error answers back into WeightcastErrors). The swarm's
 * helpers in `src/swarm/wire` stay as they are; the seed tier adds its own codes here.
 */

import type { IncomingMessage, ServerResponse } from 'node:http';
import { Agent, buildConnector, request, type Dispatcher } from 'undici';
import { z } from 'zod';
import { authHeaders, untrustedCertificate, type ClientTls, type ServiceAccess } from '../auth/transport.js';
import { tlsOnDemand } from '../auth/tls-on-demand.js';
import { WeightcastError, errorEntry, isErrorCode, isWeightcastError } from '../errors.js';
import { readJsonBody, sendError } from '../swarm/wire/http-json.js';

/** JSON bodies (catalog snapshots of large models included). */
export const SEED_JSON_BYTES_MAX = 256 * 1024 * 1024;
export const NODE_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export const nodeNameSchema = z.string().regex(NODE_NAME_PATTERN, 'a node name: letters, digits, . _ : -');
export const modelHexSchema = z.string().regex(/^[0-9a-f]{64}$/, 'a model name: 64 lowercase hex digits');

export const catalogNodeSchema = z.object({
  name: nodeNameSchema,
  url: z.string().url().max(2048),
  active: z.boolean(),
});
export type CatalogNode = z.infer<typeof catalogNodeSchema>;

export const registerNodeSchema = z.object({
  url: z.string().url().max(2048),
  /** Absent: a new node is active, a known node keeps its flag (an operator's drain survives restarts). */
  active: z.boolean().optional(),
});

const holdersSchema = z.array(nodeNameSchema).min(1).max(64);

export const pieceHoldingSchema = z.object({
  index: z.number().int().nonnegative(),
  sizeBytes: z.number().int().nonnegative(),
  holders: holdersSchema,
  version: z.number().int().nonnegative(),
});

export const createModelSchema = z.object({
  /** Canonical manifest JSON; its SHA-256 must be the model's name. */
  manifest: z.string().min(2),
  /** Holders per piece, primary first, in global piece order. */
  holders: z.array(holdersSchema),
});

export const commitSchema = z.object({
  updates: z
    .array(
      z.object({
        piece: z.number().int().nonnegative(),
        expectVersion: z.number().int().nonnegative(),
        holders: holdersSchema,
      }),
    )
    .min(1)
    .max(65_536),
});
export type CommitUpdate = z.infer<typeof commitSchema>['updates'][number];

export const commitResultSchema = z.object({
  results: z.array(
    z.object({ piece: z.number().int(), ok: z.boolean(), version: z.number().int().nonnegative() }),
  ),
});
export type CommitResult = z.infer<typeof commitResultSchema>['results'][number];

export const modelSnapshotSchema = z.object({
  model: modelHexSchema,
  pieceSize: z.number().int().positive(),
  nodes: z.array(catalogNodeSchema),
  pieces: z.array(pieceHoldingSchema),
});
export type ModelSnapshot = z.infer<typeof modelSnapshotSchema>;

export const copyRequestSchema = z.object({
  /** The seed node to pull the piece from. */
  from: z.string().url().max(2048),
  /** Cap on this copy's transfer rate; absent = none. */
  bytesPerSecond: z.number().positive().optional(),
});

export const heldSchema = z.object({ held: z.array(z.number().int().nonnegative()) });
export const verifySchema = z.object({ ok: z.boolean(), digest: z.string() });
export const storeResultSchema = z.object({ result: z.enum(['stored', 'duplicate']) });

export function parseBody<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new WeightcastError(
      'SWARM_PROTOCOL',
      `malformed ${what}: ${issue?.path.join('.') ?? ''} ${issue?.message ?? ''}`.trim(),
    );
  }
  return parsed.data;
}

export function sendSeedError(res: ServerResponse, error: unknown): void {
  sendError(res, error);
}

export { readBody, sendJson } from '../swarm/wire/http-json.js';

export function readJson(req: IncomingMessage, maxBytes = SEED_JSON_BYTES_MAX): Promise<unknown> {
  return readJsonBody(req, maxBytes);
}

export interface SeedCallOptions {
  method?: 'GET' | 'PUT' | 'POST' | 'DELETE';
  /** A JSON value, or raw bytes sent as application/octet-stream. */
  body?: unknown;
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  /** Largest answer accepted. */
  maxBytes?: number;
  /** The credential and TLS settings for the service called. */
  access?: ServiceAccess | undefined;
}

const dispatchers = new WeakMap<ClientTls, Dispatcher>();
/** The key of the dispatcher for calls without TLS settings of their own. */
const DEFAULT_TLS: ClientTls = {};

/**
 * The request options that carry `access`: its bearer token, and an undici Agent with its TLS
 * settings (one per settings object; tls-on-demand.ts builds them at the first https: call).
 */
export function seedRequestAccess(access: ServiceAccess | undefined): {
  headers: Record<string, string>;
  dispatcher?: Dispatcher;
} {
  const key = access?.tls ?? DEFAULT_TLS;
  let dispatcher = dispatchers.get(key);
  if (dispatcher === undefined) {
    dispatcher = new Agent({ connect: tlsOnDemand(buildConnector, {}, access?.tls) });
    dispatchers.set(key, dispatcher);
  }
  return { headers: authHeaders(access), dispatcher };
}

/**
 * One request to a catalog or seed node; returns the answer's bytes on 2xx. A network failure is
 * SEED_NODE_UNREACHABLE; an error answer with one of our codes becomes that WeightcastError.
 */
export async function seedCallRaw(url: string, what: string, options: SeedCallOptions): Promise<Buffer> {
  const timeout = AbortSignal.timeout(options.timeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
  const raw = options.body instanceof Uint8Array;
  let status: number;
  let bytes: Buffer;
  const { headers, dispatcher } = seedRequestAccess(options.access);
  try {
    const response = await request(url, {
      method: options.method ?? 'GET',
      signal,
      ...(dispatcher === undefined ? {} : { dispatcher }),
      ...(options.body === undefined
        ? { headers }
        : raw
          ? {
              body: options.body as Uint8Array,
              headers: { ...headers, 'content-type': 'application/octet-stream' },
            }
          : {
              body: JSON.stringify(options.body),
              headers: { ...headers, 'content-type': 'application/json' },
            }),
    });
    status = response.statusCode;
    bytes = await readLimited(response.body, options.maxBytes ?? SEED_JSON_BYTES_MAX, url);
  } catch (error) {
    if (isWeightcastError(error)) throw error;
    if (options.signal?.aborted === true)
      throw new WeightcastError('ABORTED', `${what}: aborted`, {}, { cause: error });
    const untrusted = untrustedCertificate(error, url);
    if (untrusted !== undefined) throw untrusted;
    throw new WeightcastError(
      'SEED_NODE_UNREACHABLE',
      `${what} at ${url} did not answer: ${(error as Error).message}`,
      { url },
      { cause: error },
    );
  }
  if (status >= 200 && status < 300) return bytes;
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8')) as unknown;
  } catch {
    body = undefined;
  }
  const parsed = z.object({ code: z.string(), message: z.string() }).safeParse(body);
  const code = parsed.success ? parsed.data.code : undefined;
  // Only codes the catalogue lets a service send are taken at their word.
  if (parsed.success && isErrorCode(code) && errorEntry(code).remote === true) {
    throw new WeightcastError(code, `${what}: ${parsed.data.message}`, {
      url,
      status,
    });
  }
  throw new WeightcastError(
    status === 404 ? 'SEED_NO_CATALOG' : 'SWARM_PROTOCOL',
    `${what} at ${url} answered HTTP ${status}` + (parsed.success ? `: ${parsed.data.message}` : ''),
    { url, status },
  );
}

export async function seedCall(url: string, what: string, options: SeedCallOptions): Promise<unknown> {
  const bytes = await seedCallRaw(url, what, options);
  if (bytes.length === 0) return undefined;
  try {
    return JSON.parse(bytes.toString('utf8')) as unknown;
  } catch {
    throw new WeightcastError('SWARM_PROTOCOL', `${what} at ${url} answered with non-JSON`);
  }
}

async function readLimited(body: AsyncIterable<Buffer>, maxBytes: number, url: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > maxBytes) {
      throw new WeightcastError('LIMIT_EXCEEDED', `answer from ${url} is over ${maxBytes} bytes`, { url });
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

/** Path segments of a request URL below a prefix of `skip` segments. */
export function pathParts(req: IncomingMessage): { parts: string[]; query: URLSearchParams } {
  const url = new URL(req.url ?? '/', 'http://seed');
  return {
    parts: url.pathname
      .split('/')
      .filter((part) => part.length > 0)
      .map((part) => decodeURIComponent(part)),
    query: url.searchParams,
  };
}
