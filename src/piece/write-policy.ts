/**
 * Where a verified piece's write runs: on libuv's thread pool (the promise API), or as one
 * synchronous system call on the calling thread ("inline"). Pure: the store's shell measures how busy
 * its event loop is (util/loop-busy.ts) and asks here.
 *
 * Why inline at all: a pool write costs a hand-off each way (a futex wake for a pool thread, which
 * then sleeps in the device's I/O wait, and an eventfd write and an event-loop wake to resolve the
 * promise), per piece, whatever its size. On the netns fan-out (8 agents on 2 cores, 512 KiB pieces
 * at 200 Mbit/s) the agents' event loops are idle most of the time, and writing inline took 7 % less
 * agent CPU on average, less in each of 4 alternating pairs against the pool, with the same T_last
 * (docs/measurements/2026-12-06-late.md). An O_DIRECT write of such a piece takes ~0.5 ms alone
 * there, longer on a loaded machine (below).
 *
 * Why not always: a loop that is busy needs the overlap (a host reading at NIC speed), and a large
 * piece's write holds the loop for milliseconds. A write held inline counts as busy time itself, and
 * one that took long (a stalling disk) moves the store back to the pool for a while.
 */

/** Pieces larger than this go to the pool: their hand-off is small against their bytes. */
export const INLINE_WRITE_BYTES_MAX = 4 * 1024 * 1024;
/** The loop's busy share (over the last window) below which writes go inline. */
export const INLINE_WRITE_BUSY_MAX = 0.5;

/**
 * An inline write that held the loop longer than this (a stalling disk) sends the store's writes to
 * the pool for INLINE_WRITE_BACKOFF_MS: one such write barely moves the busy share, and a loop held
 * for seconds would hold every socket of the process too. Not lower: a write's time on the loop
 * includes waiting for a core once the device is done, and on the 2-core fan-out (16 processes)
 * 512 KiB writes that take ~0.5 ms alone took 2-40 ms. Disks slow on every write are the busy
 * share's to catch.
 */
export const INLINE_WRITE_SLOW_MS = 200;
export const INLINE_WRITE_BACKOFF_MS = 10_000;

/**
 * Whether a write of `bytes` goes inline when the event loop was busy `busyShare` (0-1) of late and
 * the store's last slow inline write was `sinceSlowMs` ago (Infinity: none).
 */
export function writesInline(busyShare: number, bytes: number, sinceSlowMs = Infinity): boolean {
  return (
    bytes <= INLINE_WRITE_BYTES_MAX &&
    busyShare < INLINE_WRITE_BUSY_MAX &&
    sinceSlowMs >= INLINE_WRITE_BACKOFF_MS
  );
}
