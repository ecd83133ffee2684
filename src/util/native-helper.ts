/**
 * The native helper (native/, built by node-gyp when npm installs the package): the few things
 * Node.js cannot do from JavaScript. It is optional: a machine without a compiler installs without
 * it, and every caller has a way on without (see each function's caller).
 */

import { createRequire } from 'node:module';

export interface NativeHelper {
  /** SO_RCVLOWAT on a socket's descriptor: 0, or the errno of setsockopt (receive-low-water.ts). */
  setReceiveLowWater(fd: number, bytes: number): number;
  /**
   * The address of a typed array's first byte modulo `modulus` (a power of two), or -1 when asked
   * wrongly (direct-io.ts aligns piece buffers with it). Absent from a helper built by an older
   * version (until `npm rebuild` builds it again): buffers are then aligned by probing.
   */
  addressModulo?(view: ArrayBufferView, modulus: number): number;
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
