/**
 * The peak resident memory of this process since it started its program, as the `peakRssBytes` of
 * `pull`, `load` and `preshard` report it.
 *
 * Why not `process.resourceUsage().maxRSS`: on Linux that high-water mark survives `execve`, and a
 * child starts as a copy of its parent, so a process started by one with a large resident set
 * (a benchmark holding a 256 MiB buffer, a training job) reports its parent's size: a pull of
 * ~80 MiB was reported at 268-270 MiB by `npm run bench`
 * (docs/measurements/2026-12-08-peak-rss.md). `VmHWM` in /proc/self/status is the high-water
 * mark of this program's own memory map, which `execve` starts anew. Where it cannot be read (not
 * Linux), maxRSS it is.
 */

import { readFileSync } from 'node:fs';

/** The `VmHWM` line of a /proc/PID/status text, in bytes; undefined when there is none. */
export function vmHighWaterBytes(status: string): number | undefined {
  const match = /^VmHWM:\s*(\d+)\s*kB\s*$/m.exec(status);
  return match === null ? undefined : Number(match[1]) * 1024;
}

/** This process's peak resident memory in bytes (see the module's comment). */
export function peakRssBytes(
  readStatus: () => string = () => readFileSync('/proc/self/status', 'utf8'),
): number {
  let status: string | undefined;
  try {
    status = readStatus();
  } catch {
    status = undefined;
  }
  // maxRSS is in kilobytes.
  return (
    (status === undefined ? undefined : vmHighWaterBytes(status)) ?? process.resourceUsage().maxRSS * 1024
  );
}
