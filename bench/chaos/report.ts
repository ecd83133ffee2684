/**
 * The arithmetic and the table of `npm run bench:chaos`, pure: what each host's copy holds (bytes
 * of pieces at their final names that do not match the manifest), how a host ended, and a row's
 * cells and verdict against the fault-free run of the same invocation.
 */

import type { VerifyReport } from '../../src/manifest/verify.js';
import { textTable } from '../../src/util/text-table.js';
import { formatSeconds } from '../../src/util/units.js';
import type { RowKind } from './plan.js';

/** What a host's destination holds after a row, against the manifest. */
export interface CopyCheck {
  files: number;
  /** Files at their final name, of the right size, every piece matching. */
  filesOk: number;
  /**
   * Bytes at final names that are wrong: the bad pieces of a file of the right size, and the whole
   * of a file of the wrong size. Pieces still in partial files were never delivered: not counted.
   */
  corruptBytes: number;
}

export function checkCopy(report: VerifyReport, pieceSize: number): CopyCheck {
  let corruptBytes = 0;
  for (const file of report.files) {
    if (file.verdict === 'size-mismatch') corruptBytes += file.actualSize ?? 0;
    if (file.verdict !== 'corrupt') continue;
    for (const piece of file.badPieces) {
      const start = piece * pieceSize;
      corruptBytes += Math.max(0, Math.min(file.expectedSize, start + pieceSize) - start);
    }
  }
  return {
    files: report.files.length,
    filesOk: report.files.filter((file) => file.verdict === 'ok').length,
    corruptBytes,
  };
}

/** How one host's row ended. */
export interface HostOutcome {
  label: string;
  /** Seconds from the row's start until its (last) pull exited 0; undefined if it never did. */
  seconds: number | undefined;
  /** Agent and pull starts (2 after a kill and a restart). */
  starts: number;
  /** How it ended otherwise: the pull's error, a timeout. */
  error?: string;
  /** The destination checked against the manifest after the row (undefined: not checked). */
  copy?: CopyCheck;
}

export interface RowResult {
  kind: RowKind;
  /** The fault as it was applied, for the table: hosts, when, how long. */
  fault: string;
  hosts: HostOutcome[];
  /** Bytes the origin sent during the row; undefined when not measured. */
  originBytes: number | undefined;
  /** A host expected to fail, with the error code it should end with (disk-full). */
  expectedFailure?: { host: number; code: string };
  /** What went wrong with the row itself (a fault that could not be applied, a setup error). */
  problem?: string;
  /** Why the row did not run here at all (for example, no root to mount a small disk). */
  skipped?: string;
}

export interface RowSummary {
  kind: RowKind;
  fault: string;
  hosts: number;
  completed: number;
  /** Until the last completed host; undefined if none completed. */
  wallSeconds: number | undefined;
  originRatio: number | undefined;
  /** Summed over every host's destination; undefined if no copy was checked. */
  corruptBytes: number | undefined;
  ok: boolean;
  /** `ok`, what was expected and happened, or why the row failed. */
  result: string;
}

/** Completed: the pull exited 0 and every file at the destination matches the manifest. */
export function hostCompleted(host: HostOutcome): boolean {
  return host.seconds !== undefined && host.copy !== undefined && host.copy.filesOk === host.copy.files;
}

export function summarizeRow(row: RowResult, modelBytes: number): RowSummary {
  if (row.skipped !== undefined) {
    const none = { wallSeconds: undefined, originRatio: undefined, corruptBytes: undefined };
    const base = { kind: row.kind, fault: row.fault, hosts: row.hosts.length, completed: 0 };
    return { ...base, ...none, ok: true, result: `not run: ${row.skipped}` };
  }
  const completed = row.hosts.filter(hostCompleted);
  const checked = row.hosts.flatMap((host) => (host.copy === undefined ? [] : [host.copy]));
  const corruptBytes = checked.length === 0 ? undefined : checked.reduce((sum, c) => sum + c.corruptBytes, 0);
  const problems: string[] = [];
  const expected: string[] = [];
  if (row.problem !== undefined) problems.push(row.problem);
  if (corruptBytes !== undefined && corruptBytes > 0)
    problems.push(`${corruptBytes} corrupt bytes delivered`);
  row.hosts.forEach((host, index) => {
    const expectedFailure = row.expectedFailure?.host === index ? row.expectedFailure : undefined;
    if (hostCompleted(host)) {
      if (expectedFailure !== undefined)
        problems.push(`${host.label} completed, expected ${expectedFailure.code}: was the fault applied?`);
      return;
    }
    const why = hostEnding(host);
    if (expectedFailure !== undefined && host.error?.startsWith(`${expectedFailure.code}`) === true)
      expected.push(`${host.label}: ${why} as expected`);
    else problems.push(`${host.label}: ${why}`);
  });
  const seconds = completed.flatMap((host) => (host.seconds === undefined ? [] : [host.seconds]));
  const ok = problems.length === 0;
  return {
    kind: row.kind,
    fault: row.fault,
    hosts: row.hosts.length,
    completed: completed.length,
    wallSeconds: seconds.length === 0 ? undefined : Math.max(...seconds),
    originRatio: row.originBytes === undefined ? undefined : row.originBytes / modelBytes,
    corruptBytes,
    ok,
    result: ok ? ['ok', ...expected].join('; ') : `FAILED: ${[...problems, ...expected].join('; ')}`,
  };
}

function hostEnding(host: HostOutcome): string {
  if (host.error !== undefined) return host.error;
  if (host.copy === undefined) return 'not checked';
  return `pull exited 0 but ${host.copy.files - host.copy.filesOk} of ${host.copy.files} files do not match`;
}

/**
 * A pull's failure in a few words, from its `--json` output: `CODE (ERRNO)` when the error event
 * names a system error code, else `CODE: message` cut short; undefined when there is no error event.
 */
export function pullError(stdout: string): string | undefined {
  for (const line of stdout.trim().split('\n').reverse()) {
    if (!line.includes('"event":"error"')) continue;
    try {
      const parsed = JSON.parse(line) as { error?: { code?: unknown; message?: unknown } };
      const code = typeof parsed.error?.code === 'string' ? parsed.error.code : 'ERROR';
      const message = typeof parsed.error?.message === 'string' ? parsed.error.message : '';
      const errno = /\b(E[A-Z]{2,})\b/.exec(message)?.[1];
      return errno === undefined ? `${code}: ${message.slice(0, 80)}` : `${code} (${errno})`;
    } catch {
      continue;
    }
  }
  return undefined;
}

const ROW_TITLES: Record<RowKind, string> = {
  none: 'fault-free',
  'kill-agents': 'agents killed',
  'stop-scheduler': 'scheduler stopped',
  'stop-scheduler-kill': 'stopped, then kill',
  'restart-scheduler': 'scheduler restarted',
  'origin-503': 'origin 503',
  'corrupt-peer': 'corrupt peer',
  'disk-full': 'disk full',
};

/** The table: every row against the fault-free one (the first summary of kind `none`). */
export function chaosTable(rows: readonly RowSummary[]): string[] {
  const reference = rows.find((row) => row.kind === 'none')?.wallSeconds;
  const header = [
    'row',
    'fault',
    'hosts done',
    'wall',
    'x fault-free',
    'origin / S',
    'corrupt bytes',
    'result',
  ];
  const cells = rows.map((row) => [
    ROW_TITLES[row.kind],
    row.fault,
    `${row.completed}/${row.hosts}`,
    row.wallSeconds === undefined ? '-' : formatSeconds(row.wallSeconds),
    row.wallSeconds === undefined || reference === undefined ? '-' : (row.wallSeconds / reference).toFixed(2),
    row.originRatio === undefined ? '-' : row.originRatio.toFixed(3),
    row.corruptBytes === undefined ? '-' : String(row.corruptBytes),
    row.result,
  ]);
  return textTable(header, cells, [2, 3, 4, 5, 6]);
}
