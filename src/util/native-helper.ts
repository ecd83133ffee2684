/**
 * The native helper (native/, built by node-gyp when npm installs the package): the few things
 * Node.js cannot do from JavaScript. It is optional: a machine without a compiler installs without
 * it, and every caller has a way on without (see each function's caller).
 */

import { createRequire } from 'node:module';
import type { Socket } from 'node:net';

export interface NativeHelper {
  /** SO_RCVLOWAT on a socket's descriptor: 0, or the errno of setsockopt (receive-low-water.ts). */
  setReceiveLowWater(fd: number, bytes: number): number;
  /**
   * The address of a typed array's first byte modulo `modulus` (a power of two), or -1 when asked
   * wrongly (direct-io.ts aligns piece buffers with it). Absent from a helper built by an older
   * version (until `npm rebuild` builds it again): buffers are then aligned by probing.
   */
  addressModulo?(view: ArrayBufferView, modulus: number): number;
  /**
   * TCP_CONGESTION on a socket's descriptor: 0, or the errno of setsockopt (tcp-congestion.ts).
   * Absent from a helper built by an older version, as `addressModulo`.
   */
  setCongestionControl?(fd: number, name: string): number;
  /** A socket's TCP congestion control, or undefined when it cannot be read. */
  congestionControl?(fd: number): string | undefined;
}

/** Undefined until first asked for; null when it is not there. */
let helper: NativeHelper | null | undefined;

/** The helper, or undefined (not built, another platform). */
export function nativeHelper(): NativeHelper | undefined {
  helper ??= loadHelper();
  return helper ?? undefined;
}

function loadHelper(): NativeHelper | null {
  if (process.platform !== 'linux') return null;
  try {
    // From dist/src/util to the package's build/ (node-gyp's output).
    const loaded = createRequire(import.meta.url)('../../../build/Release/weightcast_native.node') as
      Partial<NativeHelper> | undefined;
    return typeof loaded?.setReceiveLowWater === 'function' ? (loaded as NativeHelper) : null;
  } catch {
    return null;
  }
}

/**
 * A plain TCP socket's descriptor, which Node keeps on its handle (not a public API). None for TLS:
 * its handle's descriptor is the TCP socket under it, where a receive mark counts ciphertext, and the
 * end of a record already half read into TLS would never reach it. (A TLS server's `connection`
 * event still gives the plain socket under the session, which has one.)
 */
export function socketDescriptor(socket: Socket): number | undefined {
  if (socket.destroyed || (socket as Socket & { encrypted?: boolean }).encrypted === true) return undefined;
  const fd = (socket as unknown as { _handle?: { fd?: unknown } | null })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}
