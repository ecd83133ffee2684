/**
 * How busy this thread's event loop has been of late: its utilization (time not waiting for events,
 * synchronous system calls included) over the last completed window of `windowMs`. Cheap to ask per
 * piece: it reads libuv's counters at most once a window.
 */

import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/** The window the busy share is measured over. */
export const LOOP_BUSY_WINDOW_MS = 250;

export class LoopBusy {
  private mark: EventLoopUtilization;
  private markedAt: number;
  private share = 0;

  constructor(private readonly windowMs = LOOP_BUSY_WINDOW_MS) {
    this.mark = performance.eventLoopUtilization();
    this.markedAt = performance.now();
  }

  /** The busy share (0-1) of the last completed window; 0 before the first one ends. */
  busyShare(): number {
    const now = performance.now();
    if (now - this.markedAt >= this.windowMs) {
      const current = performance.eventLoopUtilization();
      this.share = performance.eventLoopUtilization(current, this.mark).utilization;
      this.mark = current;
      this.markedAt = now;
    }
    return this.share;
  }
}
