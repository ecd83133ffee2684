/** Limits of the swarm's JSON messages, on their own (no imports) so light modules can share them. */

/** Largest JSON body either side accepts; a register with a big manifest is the largest message. */
export const JSON_BODY_BYTES_MAX = 64 * 1024 * 1024;
