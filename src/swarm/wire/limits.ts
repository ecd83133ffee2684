/** Limits of the swarm's JSON messages, on their own (no imports) so light modules can share them. */

/** Largest JSON body either side accepts; a register with a big manifest is the largest message. */
export const JSON_BODY_BYTES_MAX = 64 * 1024 * 1024;

/** Pieces one assignment may cover (a transfer unit, scheduler/transfer-units.ts). */
export const ASSIGNMENT_PIECES_MAX = 64;
/**
 * Bytes one assignment may cover when it names more than one piece: what a peer serves in one
 * request (a single piece may be larger, up to the manifest's piece size). An agent's upload buffers
 * are sized by the largest request it serves, so this bounds them for models of small pieces.
 */
export const ASSIGNMENT_BYTES_MAX = 4 * 1024 * 1024;
