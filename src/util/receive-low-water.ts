/**
 * SO_RCVLOWAT on the sockets that read piece bodies (the origin client's range sockets and the peer
 * wire's): the kernel reports such a socket readable only once a body's next bytes, up to
 * LOW_WATER_MAX_BYTES, are queued, instead of every few segments. Node.js cannot set the option; the
 * native helper in native/ does, when it was built at install (`node-gyp`, which npm runs). Without
 * it (no compiler then, not Linux, or WEIGHTCAST_RCVLOWAT=off) nothing changes: reads wake as before.
 *
 * Why: at a few MB/s per flow, an agent on the 8 x 200 Mbit/s testbed woke ~1,600 times a second for
 * 26 KiB reads, and those wake-ups, not any one function, are the CPU that grows as links get
 * slower (docs/measurements/2026-11-26-rate-and-tail.md).
 *
 * No read waits for bytes that will not come: the mark never exceeds what is still expected of the
 * body being read, and is 1 between bodies (a response head, the next frame). Linux also wakes a
 * reader whose receive window is nearly closed, whatever its mark.
 */

import type { Socket } from 'node:net';
import { nativeHelper as loadedHelper, socketDescriptor, type NativeHelper } from './native-helper.js';

/** The highest mark: half a default piece. */
export const LOW_WATER_MAX_BYTES = 256 * 1024;
/** The longest the mark may hold a socket's bytes back, at the rate it had over its last window. */
export const HOLD_MS_MAX = 50;
const RATE_WINDOW_MS = 100;

/** Whether WEIGHTCAST_RCVLOWAT=off turned the mark off; read once, when first needed. */
let turnedOff: boolean | undefined;

/** The native helper, unless the mark was turned off. */
function nativeHelper(): NativeHelper | undefined {
  turnedOff ??= process.env['WEIGHTCAST_RCVLOWAT'] === 'off';
  return turnedOff ? undefined : loadedHelper();
}

/** Whether sockets get a low-water mark in this process (the helper is built and not turned off). */
export function receiveLowWaterAvailable(): boolean {
  return nativeHelper() !== undefined;
}

/**
 * What a service says at start when it reads without the helper on Linux though nobody turned it
 * off (it was not built at install): more CPU per byte, and how to get it.
 */
export function receiveLowWaterNote(
  platform: NodeJS.Platform = process.platform,
  available: boolean = receiveLowWaterAvailable(),
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  if (platform !== 'linux' || available || env['WEIGHTCAST_RCVLOWAT'] === 'off') return undefined;
  return (
    'the native socket helper (SO_RCVLOWAT) is not built, so reads wake every few packets and cost more ' +
    'CPU; `npm rebuild weightcast` builds it (it needs python3, make and a C compiler)'
  );
}

/**
 * One socket's mark. After each read its owner calls `expect` with the bytes that read brought and
 * the bytes of the body still to come (0 between bodies); the option is set only when the value
 * changes, one system call. The mark is also held to HOLD_MS_MAX of the socket's recent rate, so a
 * slow sender's bytes still reach the reader within that time and no stall timer sees a pause that
 * is not there. A socket whose option cannot or must not be set (TLS, closed) is left alone.
 */
export class ReceiveLowWater {
  private current = 1;
  private off: boolean;
  /** Bytes per ms over the last full rate window (0 until one has passed). */
  private bytesPerMs = 0;
  private windowStartMs = performance.now();
  private windowBytes = 0;

  constructor(private readonly socket: Socket) {
    this.off = nativeHelper() === undefined;
  }

  expect(bytesRead: number, bytesLeft: number): void {
    if (this.off) return;
    const now = performance.now();
    this.windowBytes += bytesRead;
    if (now - this.windowStartMs >= RATE_WINDOW_MS) {
      this.bytesPerMs = this.windowBytes / (now - this.windowStartMs);
      this.windowStartMs = now;
      this.windowBytes = 0;
    }
    const want = Math.max(
      1,
      Math.min(LOW_WATER_MAX_BYTES, bytesLeft, Math.floor(this.bytesPerMs * HOLD_MS_MAX)),
    );
    if (want === this.current) return;
    if (!setReceiveLowWater(this.socket, want)) {
      this.off = true;
      return;
    }
    this.current = want;
  }
}

/** Sets `socket`'s SO_RCVLOWAT to `bytes`; false when it cannot (no helper, no descriptor, an error). */
export function setReceiveLowWater(socket: Socket, bytes: number): boolean {
  const fd = socketDescriptor(socket);
  return fd !== undefined && nativeHelper()?.setReceiveLowWater(fd, bytes) === 0;
}
