/**
 * The chaos benchmark's origin: the ordinary file server (`src/origin/file-server.ts`, same flags
 * as `file-server-main.ts`) whose fault hook is an outage switch the benchmark flips from outside.
 * No fault switch in product code: the hook is the file server's test seam, driven from here.
 *
 * As a process it prints `{"url": ...}` once it listens, then reads commands on stdin, one a line:
 * `outage MS` answers every request 503 (`Retry-After: 1`) for the next MS milliseconds and prints
 * `{"outage": MS}`; `refused` prints `{"refused": N}`, the requests answered 503 so far.
 * SIGINT or SIGTERM closes it.
 */

import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { parseFileServerArgs } from '../../src/origin/file-server-main.js';
import {
  startFileServer,
  type FaultAction,
  type FileServer,
  type FileServerOptions,
} from '../../src/origin/file-server.js';

/** The longest outage one command may ask for. */
export const OUTAGE_MS_MAX = 600_000;

/** An outage window in time passed in (monotonic ms), and the requests refused in it. */
export class OutageSwitch {
  #untilMs = Number.NEGATIVE_INFINITY;
  #refused = 0;

  /** Refuses from `nowMs` for `durationMs` (extending a window already open, never shortening it). */
  down(nowMs: number, durationMs: number): void {
    if (!(Number.isFinite(durationMs) && durationMs >= 0 && durationMs <= OUTAGE_MS_MAX))
      throw new RangeError(`outage must be 0-${OUTAGE_MS_MAX} ms, got ${durationMs}`);
    this.#untilMs = Math.max(this.#untilMs, nowMs + durationMs);
  }

  isDown(nowMs: number): boolean {
    return nowMs < this.#untilMs;
  }

  /** The fault for a request arriving at `nowMs`: a 503 inside the window, nothing outside. */
  faultAt(nowMs: number): FaultAction | undefined {
    if (!this.isDown(nowMs)) return undefined;
    this.#refused++;
    return { kind: 'status', status: 503, retryAfter: '1' };
  }

  get refused(): number {
    return this.#refused;
  }
}

export async function startFaultOrigin(
  options: FileServerOptions,
): Promise<{ server: FileServer; outage: OutageSwitch }> {
  const outage = new OutageSwitch();
  const server = await startFileServer({ ...options, faults: () => outage.faultAt(performance.now()) });
  return { server, outage };
}

/** One stdin command applied to `outage`; the line to print, or an error for a command it does not know. */
export function applyCommand(line: string, outage: OutageSwitch, nowMs: number): string {
  const [command, argument] = line.trim().split(/\s+/);
  if (command === 'outage') {
    const ms = Number(argument);
    outage.down(nowMs, ms);
    return JSON.stringify({ outage: ms });
  }
  if (command === 'refused') return JSON.stringify({ refused: outage.refused });
  throw new Error(`unknown command ${JSON.stringify(line.trim())}`);
}

async function main(argv: readonly string[]): Promise<void> {
  const { server, outage } = await startFaultOrigin(parseFileServerArgs(argv));
  const close = (): void => void server.close().finally(() => process.exit(0));
  process.once('SIGINT', close);
  process.once('SIGTERM', close);
  process.stdout.write(JSON.stringify({ url: server.url }) + '\n');
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (line.trim() === '') continue;
    try {
      process.stdout.write(applyCommand(line, outage, performance.now()) + '\n');
    } catch (error) {
      process.stdout.write(
        JSON.stringify({ error: error instanceof Error ? error.message : String(error) }) + '\n',
      );
    }
  }
}

const invokedPath = process.argv[1];
if (invokedPath !== undefined && import.meta.url === pathToFileURL(invokedPath).href) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  });
}
