/** The servers' default limits, on their own (no imports) so the CLI's help can show them cheaply. */

/** Bytes of request bodies a process buffers at once by default (`--body-buffer-mb`). */
export const BODY_BUFFER_BYTES_DEFAULT = 256 * 1024 * 1024;

export const SERVER_LIMIT_DEFAULTS = {
  headersTimeoutMs: 30_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 30_000,
  socketIdleMs: 300_000,
  connectionsPerAddressMax: 1024,
};
