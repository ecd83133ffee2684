/**
 * The TCP congestion control of the connections peers open to an agent: what the agent sends them
 * (a chain's pushes, piece uploads) goes out under it. Node.js cannot choose it; the native helper
 * sets it on each accepted connection when it was built, and nothing changes without it.
 *
 * Why: a chain member that joined after its parent never catches up (the chain moves at the link's
 * pace), so its feed is one connection that always has bytes waiting. Under BBR (v1, Linux's) such
 * a connection cuts its window to 4 packets for ~200 ms every 10 s to measure the path's bare RTT,
 * and every host below it in the chain stalls with it. On the fan-out testbed each member lost
 * 0.1-0.2 s that way in a 11 s run; under cubic, none
 * (docs/measurements/2026-12-07-congestion-control.md). So `auto`, the default, keeps the system's
 * algorithm unless it is bbr, and then uses cubic for these connections; `system` keeps it always;
 * a name sets that algorithm.
 */

import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { constants } from 'node:os';
import { WeightcastError } from '../errors.js';
import { nativeHelper, socketDescriptor } from './native-helper.js';

export const TCP_CONGESTION_DEFAULT = 'auto';

/** What the kernel says: its default algorithm and those a socket may ask for. */
export interface KernelCongestion {
  systemDefault?: string;
  available: readonly string[];
}

/**
 * The algorithm to set for `setting` (auto, system or a name), or undefined to leave the system's.
 * A name the kernel does not offer is a USAGE error that lists what it offers.
 */
export function chooseCongestion(setting: string, kernel: KernelCongestion): string | undefined {
  if (setting === 'system') return undefined;
  if (setting === 'auto') {
    return kernel.systemDefault === 'bbr' && kernel.available.includes('cubic') ? 'cubic' : undefined;
  }
  if (!kernel.available.includes(setting)) {
    const offered = kernel.available.length === 0 ? 'none that could be read' : kernel.available.join(', ');
    throw new WeightcastError(
      'USAGE',
      `--tcp-congestion must be auto, system or an algorithm this kernel offers (${offered}), got ${setting}`,
    );
  }
  return setting;
}

/** The kernel's default and available algorithms for this network namespace (none off Linux). */
export function kernelCongestion(
  read: (path: string) => string = (path) => readFileSync(path, 'utf8'),
): KernelCongestion {
  const words = (path: string): string[] => {
    try {
      return read(path)
        .trim()
        .split(/\s+/)
        .filter((word) => word.length > 0);
    } catch {
      return [];
    }
  };
  const systemDefault = words('/proc/sys/net/ipv4/tcp_congestion_control')[0];
  const available = words('/proc/sys/net/ipv4/tcp_available_congestion_control');
  return systemDefault === undefined ? { available } : { systemDefault, available };
}

/** Whether this process can set a socket's algorithm (the native helper is built and has it). */
export function congestionSettable(): boolean {
  return nativeHelper()?.setCongestionControl !== undefined;
}

/**
 * The setter for `setting` in this network namespace, or undefined when connections keep the
 * system's algorithm. A name given outright needs the native helper (USAGE without it); `auto`
 * without it tells `onFailure` why and keeps the system's.
 */
export function congestionSetterFor(
  setting: string,
  onFailure: (wanted: string, reason: string) => void,
  kernel: KernelCongestion = kernelCongestion(),
): CongestionSetter | undefined {
  const name = chooseCongestion(setting, kernel);
  if (name === undefined) return undefined;
  const setter = new CongestionSetter(name, (reason) => onFailure(name, reason));
  if (!congestionSettable()) {
    if (setting !== 'auto') {
      throw new WeightcastError(
        'USAGE',
        `--tcp-congestion ${setting} needs the native helper, ${HELPER_MISSING}`,
      );
    }
    setter.fail(`the native helper is ${HELPER_MISSING}`);
    return undefined;
  }
  return setter;
}

const HELPER_MISSING = 'which is not built (`npm rebuild weightcast` builds it)';

/**
 * Sets one algorithm on the sockets it is given. The first failure (no helper, a refusal) is told
 * to `onFailure` and ends the trying: the connections keep the system's algorithm.
 */
export class CongestionSetter {
  private failed = false;

  constructor(
    readonly name: string,
    private readonly onFailure: (reason: string) => void,
  ) {}

  apply(socket: Socket): void {
    if (this.failed) return;
    const fd = socketDescriptor(socket);
    if (fd === undefined) return;
    const error = nativeHelper()?.setCongestionControl?.(fd, this.name);
    if (error === 0) return;
    this.fail(
      error === undefined
        ? `the native helper is ${HELPER_MISSING}`
        : `the kernel refused it (${errnoName(error)})`,
    );
  }

  /** Stops the trying and says why, once. */
  fail(reason: string): void {
    if (this.failed) return;
    this.failed = true;
    this.onFailure(reason);
  }
}

/** The congestion control of `socket`, when the helper can read it (for tests and diagnostics). */
export function socketCongestion(socket: Socket): string | undefined {
  const fd = socketDescriptor(socket);
  return fd === undefined ? undefined : nativeHelper()?.congestionControl?.(fd);
}

function errnoName(errno: number): string {
  const name = Object.entries(constants.errno).find(([, value]) => value === errno)?.[0];
  return name ?? `errno ${errno}`;
}
