/**
 * The swarm's wire protocol, one place for every message that crosses a socket: agent <-> scheduler
 * (register, sync, leave) and agent <-> agent (pieces, have-maps). Bodies are JSON, checked on arrival
 * (util/schema.ts) because they come from other machines; piece bodies are raw bytes.
 *
 * Scheduler API (JSON):
 *   POST   /v1/swarms/:model/hosts            Register   -> Registered  (409 SWARM_UNKNOWN_MODEL: send the manifest;
 *                                           with assignmentsInReply, the host's first assignments come back in it)
 *   GET    /v1/swarms/:model/hosts/:id/channel  Upgrade: weightcast-sync -> 101, then Sync frames in and
 *                                           SyncReply frames out, newline-delimited JSON (sync-channel.ts);
 *                                           what agents use
 *   POST   /v1/swarms/:model/hosts/:id/sync   Sync       -> SyncReply   (one sync over plain HTTP, long-polling up
 *                                           to waitMs; 404 SWARM_UNKNOWN_HOST: register again)
 *   DELETE /v1/swarms/:model/hosts/:id                   -> 204
 *   GET    /v1/swarms/:model                             -> SwarmStatus
 *   GET    /healthz                                      -> {"ok":true}
 * Agent peer API:
 *   GET /v1/models/:model/files/:path    -> a byte range (Range header) of a model file, at most one
 *                                           piece or ASSIGNMENT_BYTES_MAX long and only if every piece
 *                                           under it is held verified (404 SWARM_PIECE_NOT_HELD,
 *                                           503 SWARM_BUSY + Retry-After); bodies land zero-copy
 *                                           in the reader's piece buffer
 *   GET /v1/models/:model/have           -> Have (a bitfield of verified pieces)
 * `:model` is the manifest digest's hex (64 characters); pieces are global indices (see PieceMap).
 */

import * as s from '../../util/schema.js';
import { WeightcastError } from '../../errors.js';

import { ASSIGNMENT_BYTES_MAX, ASSIGNMENT_PIECES_MAX, JSON_BODY_BYTES_MAX } from './limits.js';

export { ASSIGNMENT_BYTES_MAX, ASSIGNMENT_PIECES_MAX, JSON_BODY_BYTES_MAX };
/** Transfers reported or assigned in one sync, each way. */
export const SYNC_ITEMS_MAX = 4096;
/** Longest a sync may wait for work before it answers empty (it doubles as the heartbeat). */
export const SYNC_WAIT_MS_MAX = 30_000;

export const modelHex = s.string({
  pattern: [/^[0-9a-f]{64}$/, 'expected the manifest digest as 64 hex digits'],
});

const rate = s.number({ positive: true, max: 1e13 });
const label = s.string({ min: 1, max: 128 });
const id = s.count();

export const registerSchema = s.object({
  /** Stable name of the agent (survives restarts), for logs and status. */
  name: s.string({ min: 1, max: 256 }),
  /** Base URL where peers fetch pieces from this host, e.g. http://10.0.0.2:7100. */
  url: s.string({ url: true, max: 2048 }),
  zone: s.optional(label),
  rack: s.optional(label),
  uploadBytesPerSecond: rate,
  downloadBytesPerSecond: rate,
  /** Verified pieces already held: a base64 bitfield (see encodeBitfield). */
  have: s.string({ max: 64 * 1024 * 1024 }),
  /** The canonical manifest bytes (utf8 JSON), needed the first time the scheduler sees the model. */
  manifest: s.optional(s.string({ max: JSON_BODY_BYTES_MAX })),
  /**
   * The agent runs the assignments listed in the reply (Registered.assignments) and reports them
   * on its channel: its first transfers start a round trip sooner. Without it they wait for the
   * channel, as before, so an older agent loses nothing.
   */
  assignmentsInReply: s.optional(s.boolean()),
});
export type Register = s.Infer<typeof registerSchema>;

export const outcomeSchema = s.oneOf(['verified', 'corrupt', 'failed', 'cancelled']);

export const reportSchema = s.object({
  transferId: id,
  outcome: outcomeSchema,
  bytesPerSecond: s.optional(s.number({ min: 0 })),
});
export type Report = s.Infer<typeof reportSchema>;

export const syncSchema = s.object({
  reports: s.array(reportSchema, { max: SYNC_ITEMS_MAX }),
  /** Pieces that should come first because a reader is waiting on them. */
  urgent: s.optional(s.array(id, { max: SYNC_ITEMS_MAX })),
  /**
   * Transfers about to finish (pipelining): the scheduler may plan this host's next download, and
   * the parent's next upload, now, so the next request starts as this one ends.
   */
  ending: s.optional(s.array(id, { max: SYNC_ITEMS_MAX })),
  /** How long the scheduler may hold the request when it has nothing to say. */
  waitMs: s.count(SYNC_WAIT_MS_MAX),
  /** Ring mode: pieces pushed to this host by its ring parent, verified and stored since the last sync. */
  held: s.optional(s.array(id, { max: SYNC_ITEMS_MAX })),
  /** Ring mode: the feed from this host's ring parent ended, and why. */
  ringLost: s.optional(s.string({ max: 1024 })),
  /** Ring mode: the URL of the parent whose feed ended (a report about a parent since replaced is old news). */
  ringLostParent: s.optional(s.string({ max: 2048 })),
  /** Ring mode: the feed ended on this piece failing its check (a corrupt push). */
  ringLostPiece: s.optional(id),
});
export type Sync = s.Infer<typeof syncSchema>;

export const assignmentSchema = s.object({
  transferId: id,
  /** The first piece to fetch. */
  piece: id,
  /**
   * How many consecutive pieces of the same file, from `piece` on (absent: 1). The agent fetches
   * the ones it lacks as one range and verifies each piece on its own.
   */
  count: s.optional(s.number({ int: true, positive: true, max: ASSIGNMENT_PIECES_MAX })),
  /** Where to fetch: "origin", or a peer's base URL. */
  from: s.string({ max: 2048 }),
  /** The peer's host id, absent for the origin. */
  peer: s.optional(id),
  hedge: s.boolean(),
});
export type WireAssignment = s.Infer<typeof assignmentSchema>;

/**
 * Ring mode: this host's ring parent (a base URL) to subscribe to, or, without it, none; `head`:
 * without a parent, this host heads a chain (it reads the origin for the chain, on its own too if
 * the scheduler goes quiet); `chain`: its ring is a chain (so without a scheduler the pushes bring
 * every piece, and a member they still feed fetches only blocked pieces).
 */
const ringNewsSchema = s.object({
  parent: s.optional(s.string({ max: 2048 })),
  head: s.optional(s.boolean()),
  chain: s.optional(s.boolean()),
});

export const registeredSchema = s.object({
  host: id,
  pieceCount: id,
  /** How often the scheduler expects a sync before it drops the host. */
  hostTimeoutMs: s.number({ int: true, positive: true }),
  /** The host's first assignments, when the register asked for them (assignmentsInReply). */
  assignments: s.optional(s.array(assignmentSchema, { max: SYNC_ITEMS_MAX })),
  /** Ring mode: the host's place, at once (its feed opens before the sync channel does). */
  ring: s.optional(ringNewsSchema),
  /** The peers this host may use on its own, as in a sync reply (`syncReplySchema`). */
  peers: s.optional(s.array(s.string({ max: 2048 }), { max: 1024 })),
  rackPeers: s.optional(s.count(1024)),
});
export type Registered = s.Infer<typeof registeredSchema>;

export const syncReplySchema = s.object({
  assignments: s.array(assignmentSchema, { max: SYNC_ITEMS_MAX }),
  cancellations: s.array(id, { max: SYNC_ITEMS_MAX }),
  /**
   * Peers this host may use on its own if the scheduler goes away: base URLs. Present only when the
   * swarm's membership changed since this host's last reply (absent: unchanged; empty: none now).
   */
  peers: s.optional(s.array(s.string({ max: 2048 }), { max: 1024 })),
  /** With `peers`, for a host with a rack: how many of the first peers listed share its rack. */
  rackPeers: s.optional(s.count(1024)),
  /**
   * Ring mode: this host's ring parent changed; subscribe to `parent` (a base URL), or, without it,
   * to nobody; `head`: without a parent, this host heads a chain (it reads the origin for the
   * chain, on its own too if the scheduler goes quiet). Absent: unchanged.
   */
  ring: s.optional(ringNewsSchema),
});
export type SyncReply = s.Infer<typeof syncReplySchema>;

const integer = s.number({ int: true });
const amount = s.number();

export const swarmStatusSchema = s.object({
  model: modelHex,
  pieceCount: integer,
  totalBytes: amount,
  hosts: s.array(
    s.object({
      host: integer,
      name: s.string(),
      url: s.string(),
      held: integer,
      complete: s.boolean(),
      demoted: s.boolean(),
      banned: s.boolean(),
    }),
  ),
  originBytesAssigned: amount,
  /** Transfers assigned and not yet reported, and how many of them read the origin. */
  transfersInFlight: amount,
  originTransfersInFlight: amount,
  transfersVerified: amount,
  transfersCorrupt: amount,
  transfersFailed: amount,
  /** Re-checks of suspected pieces by a third host: started, refuting the report, confirming it. */
  rechecks: s.object({ started: amount, refuted: amount, confirmed: amount }),
  /** Ring mode: hosts in rings, those fed by a ring parent now, and those whose link was cut. */
  ring: s.optional(s.object({ members: amount, fed: amount, cut: amount })),
});
export type SwarmStatus = s.Infer<typeof swarmStatusSchema>;

/**
 * A peer's have-map. In ring mode also its ring (fallback.ts FallbackPeer.ring): whether it pushes
 * to a ring child, whether pieces keep coming to it, how many it holds, whose feed it takes, and
 * whether it reads the origin for its chain.
 */
export const haveSchema = s.object({
  pieceCount: id,
  have: s.string(),
  ring: s.optional(
    s.object({
      pushing: s.boolean(),
      flowing: s.boolean(),
      held: id,
      parent: s.optional(s.string({ max: 2048 })),
      head: s.optional(s.boolean()),
    }),
  ),
});
export type Have = s.Infer<typeof haveSchema>;

export const errorBodySchema = s.object({ code: s.string(), message: s.string() });

/** Parses an external message or throws SWARM_PROTOCOL naming what was wrong. */
export function parseMessage<T>(schema: s.Schema<T>, raw: unknown, what: string): T {
  const parsed = s.safeParse(schema, raw);
  if (parsed.success) return parsed.data;
  throw new WeightcastError('SWARM_PROTOCOL', `malformed ${what} at ${parsed.issue.message}`);
}

/** Bit i of the bitfield is piece i; byte i >> 3, least significant bit first. */
export function encodeBitfield(pieceCount: number, has: (piece: number) => boolean): string {
  const bytes = Buffer.alloc(Math.ceil(pieceCount / 8));
  for (let piece = 0; piece < pieceCount; piece++) {
    if (has(piece)) bytes[piece >> 3] = (bytes[piece >> 3] ?? 0) | (1 << (piece & 7));
  }
  return bytes.toString('base64');
}

/** The pieces set in a base64 bitfield, or SWARM_PROTOCOL when it does not fit `pieceCount`. */
export function decodeBitfield(encoded: string, pieceCount: number): number[] {
  const bytes = Buffer.from(encoded, 'base64');
  if (bytes.length !== Math.ceil(pieceCount / 8)) {
    throw new WeightcastError(
      'SWARM_PROTOCOL',
      `bitfield has ${bytes.length} bytes, expected ${Math.ceil(pieceCount / 8)} for ${pieceCount} pieces`,
    );
  }
  const out: number[] = [];
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i] ?? 0;
    if (byte === 0) continue;
    for (let bit = 0; bit < 8; bit++) {
      if ((byte & (1 << bit)) === 0) continue;
      const piece = i * 8 + bit;
      if (piece >= pieceCount)
        throw new WeightcastError('SWARM_PROTOCOL', 'bitfield sets bits past the last piece');
      out.push(piece);
    }
  }
  return out;
}
