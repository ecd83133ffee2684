/**
 * The vocabulary of the swarm core: hosts, pieces, transfers, and the inputs and outputs of the
 * scheduling state machine. The core is pure: time comes in as `nowMs`, randomness from a seeded
 * generator it owns, and it never touches sockets, files or clocks. The simulator and the real
 * scheduler service drive the same core through these types.
 */

/** Hosts are small integers inside the core; the shell maps its own host names to them. */
export type HostId = number;

/** The origin is not a host: it has no download side and holds every piece. */
export const ORIGIN: HostId = -1;

export interface HostSpec {
  id: HostId;
  /**
   * Locality labels: parents in the same rack, then the same zone, are preferred. A host with a rack
   * label fetches from other racks only as the rack crossing rule allows (racks.ts).
   */
  zone?: string;
  rack?: string;
  uploadBytesPerSecond: number;
  downloadBytesPerSecond: number;
  /** A seed holds every piece from the start and downloads nothing (seed tier nodes). */
  seed?: boolean;
}

export interface SwarmConfig {
  pieceCount: number;
  /** Size of every piece but the last, which is `totalBytes - (pieceCount - 1) * pieceBytes`. */
  pieceBytes: number;
  totalBytes: number;
  originUploadBytesPerSecond: number;
  /** At most this many transfers read from the origin at once. */
  originReadersMax: number;
  /** Pieces a host downloads at once. */
  downloadsPerHostMax: number;
  /** Pieces a host uploads at once. */
  uploadsPerHostMax: number;
  /** When a host lacks at most this many pieces, it may request pieces already in flight (hedging). */
  hedgeTailPieces: number;
  /** Seed of the core's own random generator (tie-breaks, sampling). */
  randomSeed: number;
  /**
   * Origin transfers one host may have at once. Default: 1 while at least `originReadersMax` hosts
   * are downloading (first copies land on as many hosts as possible), more when there are fewer.
   */
  originReadersPerHostMax?: number;
  /**
   * How often, while some hosts wait with free download slots, the core asks for `handleTimeout` to
   * re-plan a few of them (a safety net; reports normally wake them). Default 1000 ms.
   */
  sweepIntervalMs?: number;
  /**
   * Ring pairings (default RING_PARENTS_DEFAULT; 0 = off): host h downloads first from the next K
   * present hosts by id (h+1, h+2, ...), at most one live transfer from each, taking the rarest piece
   * in a window of that parent's bitfield that h lacks (else the parent's newest such piece); the
   * usual choice fills the other slots. Every host then serves about K children, a fixed and
   * balanced pattern that TCP fills better than one that changes with every piece (bench:tcp). A
   * host with a rack label rings with its rack-mates only.
   */
  ringParents?: number;
  /**
   * Ring mode as chains (ring-plan.ts, `chain`): a fed host takes no first copies and no entries;
   * each ring's head, fed by nobody, takes the model per piece and the chain passes it on.
   */
  ringChain?: boolean;
}

/**
 * Transfers that may read the origin at once: the scheduler's `--origin-readers` and the simulator's
 * unless told otherwise (one source, so the simulator predicts the swarm the scheduler runs).
 */
export const ORIGIN_READERS_DEFAULT = 4;

/** SwarmConfig.ringParents when not given: one ring parent per default download slot. */
export const RING_PARENTS_DEFAULT = 4;

/**
 * Members one ring takes; later hosts make further rings. A ring queues at every hop (its members
 * send their first copies beside the pushes): in the simulator one ring of 300 hosts took 18.1 s
 * where per-piece planning took 17.1, rings of 16 20.3 s.
 */
export const RING_MEMBERS_MAX_DEFAULT = 16;

/**
 * Members one chain takes: no limit, one chain. Each hop passes a piece on one read after its first
 * bytes land (cut-through), so a chain costs a few ms per hop, while chains of 16 fed one another
 * per piece halved the simulated efficiency (100 hosts: 15.0 s against 8.15 s in one chain).
 */
export const CHAIN_MEMBERS_MAX_DEFAULT = Number.MAX_SAFE_INTEGER;

/**
 * The scheduler's and the simulator's hedgeTailPieces unless told otherwise. 10, not 4: on the
 * netns fan-out (8 x 200 Mbit/s) 8 alternating pairs gave 12.45 s against 12.74 s on average (6
 * faster, 2 equal), the last host trailing the median less; the simulator, which has no slow parent
 * at the tail, is indifferent (11.53 against 11.50 s at that setting).
 */
export const HEDGE_TAIL_PIECES_DEFAULT = 10;

/** A transfer the core wants started: `host` fetches `piece` from `from` (a host or ORIGIN). */
export interface Assignment {
  /**
   * Unique among transfers in flight; a safe integer that passes 2^31 early in a long run (it
   * carries a reuse generation), so shells keep it as a number, never in 32 bits.
   */
  transferId: number;
  host: HostId;
  piece: number;
  from: HostId;
  /** A duplicate of a transfer already in flight for the same host and piece. */
  hedge: boolean;
}

export type TransferOutcome =
  /** The bytes arrived and matched the piece's SHA-256. */
  | 'verified'
  /** The bytes arrived and did not match: the sender is at fault. */
  | 'corrupt'
  /** No progress for too long, or the sender refused (overload, gone). */
  | 'failed'
  /** Cancelled by the core (a hedge lost the race) or by the shell (host leaving). */
  | 'cancelled';

export interface TransferReport {
  transferId: number;
  outcome: TransferOutcome;
  /** Measured throughput of the transfer, for parent scoring (verified transfers). */
  bytesPerSecond?: number;
}

export interface SwarmStats {
  /** Bytes the origin was asked to send (assignments from ORIGIN times piece sizes), hedges included. */
  originBytesAssigned: number;
  transfersAssigned: number;
  transfersVerified: number;
  transfersCorrupt: number;
  transfersFailed: number;
  transfersCancelled: number;
  /** Parents a host banned for itself after PAIR_FAILURES_BAN failed transfers in a row from them. */
  parentsBannedAfterFailures: number;
  hedgesAssigned: number;
  /** Hosts present now that hold every piece, seeds not counted. */
  hostsComplete: number;
  /** Re-checks of suspected pieces (recheck.ts): probes started, accusations refuted, confirmed. */
  rechecksStarted: number;
  rechecksRefuted: number;
  rechecksConfirmed: number;
}
