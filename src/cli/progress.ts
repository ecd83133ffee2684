/**
 * Progress output for long commands: a redrawn bar on a terminal (stderr), JSON lines otherwise
 * (stdout with --json, stderr without). Throttled so that a fast transfer does not flood the output.
 */

import { formatBytes, formatRate } from '../util/units.js';
import type { RetryEvent } from '../origin/http.js';
import type { CliIo } from './io.js';

const BAR_WIDTH = 30;
const REDRAW_MS = 100;
const JSON_LINE_MS = 1000;

export interface Progress {
  update(done: number, total: number, note?: string): void;
  /**
   * Work already done before this run (a resumed pull's verified pieces), left out of the rate.
   * Without it the rate counts everything from 0: taking the first update as the start made a pull
   * whose first update was its whole file (a 3-byte file) report 0 B/s.
   */
  startFrom(done: number): void;
  /** Prints a line of its own without garbling the bar. */
  log(line: string): void;
  finish(): void;
}

export function createProgress(io: CliIo, label: string, json: boolean): Progress {
  const started = performance.now();
  let lastDraw = 0;
  let drawn = false;
  let doneAtStart = 0;
  const jsonOut = (text: string): void => (json ? io.stdout(text) : io.stderr(text));
  return {
    update(done, total, note) {
      const now = performance.now();
      const finished = done >= total;
      if (io.stderrIsTTY && !json) {
        if (now - lastDraw < REDRAW_MS && !finished) return;
        lastDraw = now;
        const fraction = total > 0 ? Math.min(1, done / total) : 1;
        const filled = Math.round(fraction * BAR_WIDTH);
        const bar = '█'.repeat(filled) + '░'.repeat(BAR_WIDTH - filled);
        const rate = formatRate(done - doneAtStart, (now - started) / 1000);
        const text = `${label} ${bar} ${(fraction * 100).toFixed(1).padStart(5)}% ${formatBytes(done)}/${formatBytes(total)} ${rate}${note ? ' ' + note : ''}`;
        io.stderr(`\r\x1b[2K${text}`);
        drawn = true;
        return;
      }
      if (now - lastDraw < JSON_LINE_MS && !finished) return;
      lastDraw = now;
      jsonOut(
        JSON.stringify({
          event: 'progress',
          task: label,
          bytesDone: done,
          bytesTotal: total,
          seconds: +((now - started) / 1000).toFixed(3),
        }) + '\n',
      );
    },
    startFrom(done) {
      doneAtStart = done;
    },
    log(line) {
      if (drawn) io.stderr('\r\x1b[2K');
      io.stderr(line + '\n');
      lastDraw = 0;
    },
    finish() {
      if (drawn) io.stderr('\n');
      drawn = false;
    },
  };
}

/** The line shown while an origin is retried: what failed, and how much of the budget is left. */
export function originRetryLine(event: Omit<RetryEvent, 'error'>): string {
  return (
    `origin unavailable for ${event.path} (${event.reason}); retry ${event.attempt} in ` +
    `${Math.round(event.delayMs)} ms, ${seconds(event.elapsedMs)} of ${seconds(event.budgetMs)} waited`
  );
}

/**
 * A corrupt piece as the agent's and `pull --scheduler`'s lines name it: where it is and who sent it.
 * A peer is named by its URL (the event's `parent`): "a peer" alone left an operator of a swarm of
 * many hosts unable to tell which one sent wrong bytes.
 */
export function corruptPieceText(event: {
  piece: number;
  from: 'origin' | 'peer';
  parent?: string | undefined;
  file?: { path: string; piece: number } | undefined;
}): string {
  const where = event.file === undefined ? '' : ` (${event.file.path} piece ${event.file.piece})`;
  const sender =
    event.from === 'origin' ? 'the origin' : event.parent === undefined ? 'a peer' : `peer ${event.parent}`;
  return `piece ${event.piece}${where} from ${sender} failed verification`;
}

function seconds(ms: number): string {
  return `${Math.round(ms / 1000)} s`;
}

/** How often a continuing origin outage is summarised after its first line. */
export const RETRY_SUMMARY_MS = 5000;

/**
 * Origin retries as a reader wants them: the first retry of a kind of failure in full, then while
 * the same failure goes on, one summary line per RETRY_SUMMARY_MS (how many retries of how many
 * files), instead of one line per retry of every read in flight (a pull with 16 reads in flight
 * printed ~200 lines a minute while its origin was down). A new kind of failure is shown at once.
 * `nowMs` is the clock (tests pass their own).
 */
export function originRetryReporter(
  log: (line: string) => void,
  nowMs: () => number = () => performance.now(),
): (event: Omit<RetryEvent, 'error'>) => void {
  let kind: string | undefined;
  let shownMs = 0;
  let retries = 0;
  const files = new Set<string>();
  return (event) => {
    // The same failure of another file is the same kind: what the reason says after the file's
    // name ("read of FILE: connect ECONNREFUSED ..."), or the reason without the name.
    const named = event.reason.indexOf(`${event.path}: `);
    const failure =
      named >= 0
        ? event.reason.slice(named + event.path.length + 2)
        : event.reason.split(event.path).join('...');
    const now = nowMs();
    if (failure !== kind) {
      kind = failure;
      shownMs = now;
      retries = 0;
      files.clear();
      // A budget shorter than the period (an origin not reached yet) ends before any summary.
      const summaries =
        event.budgetMs > RETRY_SUMMARY_MS
          ? ` (while this goes on: a summary every ${seconds(RETRY_SUMMARY_MS)})`
          : '';
      log(`${originRetryLine(event)}${summaries}`);
      return;
    }
    retries++;
    files.add(event.path);
    if (now - shownMs < RETRY_SUMMARY_MS) return;
    log(
      `origin still unavailable (${failure}): ${retries} ${retries === 1 ? 'retry' : 'retries'} of ` +
        `${files.size} ${files.size === 1 ? 'file' : 'files'} in the last ${seconds(now - shownMs)}; ` +
        `${seconds(event.elapsedMs)} of ${seconds(event.budgetMs)} waited`,
    );
    shownMs = now;
    retries = 0;
    files.clear();
  };
}
