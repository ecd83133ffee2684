/**
 * A token bucket for byte rates: `take(n)` returns once `n` bytes fit under the rate. Used by agents
 * and the origin server to cap their own links (`--upload-mbps`, `--download-mbps`) when no `tc` does
 * it for them. Callers take after moving a chunk, so a chunk larger than the burst just waits longer;
 * concurrent takers queue behind each other's debt, so the total stays at the rate.
 */

import { setTimeout as sleep } from 'node:timers/promises';

/** Bytes the bucket may hold: enough for smooth 64 KiB chunks, small enough to keep the rate honest. */
const BURST_SECONDS = 0.05;
const BURST_BYTES_MIN = 128 * 1024;

export class Throttle {
  private tokens: number;
  private last: number;
  private readonly burst: number;

  /** `bytesPerSecond` undefined or Infinity: no limit. */
  constructor(readonly bytesPerSecond: number | undefined) {
    this.burst =
      bytesPerSecond === undefined ? Infinity : Math.max(BURST_BYTES_MIN, bytesPerSecond * BURST_SECONDS);
    this.tokens = this.burst;
    this.last = performance.now();
  }

  get limited(): boolean {
    return this.bytesPerSecond !== undefined && Number.isFinite(this.bytesPerSecond);
  }

  async take(bytes: number, signal?: AbortSignal): Promise<void> {
    const rate = this.bytesPerSecond;
    if (rate === undefined || !Number.isFinite(rate)) return;
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * rate);
    this.last = now;
    this.tokens -= bytes;
    if (this.tokens >= 0) return;
    const waitMs = (-this.tokens / rate) * 1000;
    await sleep(waitMs, undefined, signal ? { signal } : undefined);
  }
}

export function mbpsToBytesPerSecond(mbps: number): number {
  return (mbps * 1_000_000) / 8;
}
