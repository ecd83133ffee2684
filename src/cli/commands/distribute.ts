/**
 * `weightcast distribute MODEL --scheduler URL --mode M`: re-lays a model's pieces over the seed
 * tier. Without `--apply` a dry run prints the layout and the plan; with it the moves run through the
 * journalled apply (src/seed/apply) and the model's whole-file SHA-256 is printed before and after.
 */

import { resolveAccess, type AccessFlags } from '../../auth/credentials.js';
import type { ServiceAccess } from '../../auth/transport.js';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { WeightcastError } from '../../errors.js';
import type { Manifest } from '../../manifest/manifest.js';
import { PieceMap } from '../../piece/piece-map.js';
import { applyDistribute, CRASH_STEPS, type ApplyEvent, type CrashStep } from '../../seed/apply/apply.js';
import { tierFileHashes, type FileHash } from '../../seed/apply/hashes.js';
import { MoveJournal } from '../../seed/apply/journal.js';
import { CatalogClient, modelNameOf } from '../../seed/catalog/client.js';
import {
  DISTRIBUTE_MODES,
  isDistributeMode,
  planDistribute,
  planToJson,
  renderPlanText,
  type DistributeMode,
} from '../../seed/plan/index.js';
import { formatBytes, formatSeconds, parseMbps, parsePositiveInt } from '../../util/units.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress } from '../progress.js';
import { serviceUrlFlag } from './service-url.js';

export interface DistributeFlags extends AccessFlags {
  scheduler: string;
  mode: string;
  nodes?: string;
  apply?: boolean;
  json?: boolean;
  state?: string;
  graceMs: string;
  moves: string;
  nodeMoves: string;
  nodeMbps?: string;
  fileHashes: boolean;
  crashAfter?: string;
}

export async function distributeCommand(
  modelText: string,
  flags: DistributeFlags,
  io: CliIo,
): Promise<number> {
  const json = flags.json === true;
  try {
    const hex = modelNameOf(modelText);
    serviceUrlFlag(flags.scheduler, '--scheduler', 'http://10.0.0.1:7000');
    if (!isDistributeMode(flags.mode)) {
      throw new WeightcastError('USAGE', `--mode must be one of ${DISTRIBUTE_MODES.join(', ')}`);
    }
    const nodes = flags.nodes === undefined ? undefined : parsePositiveInt(flags.nodes, '--nodes');
    const stateDir = flags.state ?? join(homedir(), '.weightcast', 'distribute');
    const access = (await resolveAccess(flags, { sendOperator: true })).client;
    if (flags.apply !== true) return await dryRun(hex, flags.mode, nodes, stateDir, flags, io, access);
    return await applyCommand(hex, flags.mode, nodes, stateDir, flags, io, access);
  } catch (error) {
    return reportError(io, error, json);
  }
}

async function dryRun(
  hex: string,
  mode: DistributeMode,
  nodes: number | undefined,
  stateDir: string,
  flags: DistributeFlags,
  io: CliIo,
  access: ServiceAccess,
): Promise<number> {
  const catalog = new CatalogClient(flags.scheduler, access);
  const snapshot = await catalog.requireSnapshot(hex, { signal: io.signal });
  const plan = planDistribute(
    { model: hex, nodes: snapshot.nodes, pieces: snapshot.pieces },
    { mode, ...(nodes === undefined ? {} : { nodes }) },
  );
  const unfinished = await unfinishedMoves(stateDir, hex);
  if (flags.json === true) {
    io.stdout(JSON.stringify({ ...(planToJson(plan) as object), unfinishedMoves: unfinished }) + '\n');
  } else {
    io.stdout(renderPlanText(plan));
    if (unfinished > 0) {
      io.stdout(
        `\n${unfinished} moves of an interrupted apply are in the journal; --apply finishes or undoes them first\n`,
      );
    }
    io.stdout('\ndry run: nothing changed (add --apply to carry the plan out)\n');
  }
  return 0;
}

async function unfinishedMoves(stateDir: string, hex: string): Promise<number> {
  try {
    const journal = await MoveJournal.open(join(stateDir, `${hex}.journal`));
    try {
      return journal.unfinished().length;
    } finally {
      await journal.close();
    }
  } catch {
    return 0;
  }
}

async function applyCommand(
  hex: string,
  mode: DistributeMode,
  nodes: number | undefined,
  stateDir: string,
  flags: DistributeFlags,
  io: CliIo,
  access: ServiceAccess,
): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'distribute', json);
  const line = (data: object, text: string | undefined): void => {
    if (json) io.stdout(JSON.stringify(data) + '\n');
    else if (text !== undefined) progress.log(text);
  };
  const started = performance.now();
  try {
    const catalog = new CatalogClient(flags.scheduler, access);
    const manifest = await catalog.manifest(hex, { signal: io.signal });
    const hashes = flags.fileHashes;
    const before = hashes
      ? await tierFileHashes(flags.scheduler, hex, manifest, io.signal, access)
      : undefined;
    const nodeBytesPerSecond = parseMbps(flags.nodeMbps, '--node-mbps');
    const result = await applyDistribute({
      schedulerUrl: flags.scheduler,
      access,
      model: hex,
      mode,
      ...(nodes === undefined ? {} : { nodes }),
      stateDir,
      graceMs: parseNonNegative(flags.graceMs, '--grace-ms'),
      movesMax: parsePositiveInt(flags.moves, '--moves'),
      nodeMovesMax: parsePositiveInt(flags.nodeMoves, '--node-moves'),
      ...(nodeBytesPerSecond === undefined ? {} : { nodeBytesPerSecond }),
      signal: io.signal,
      ...(flags.crashAfter === undefined ? {} : { crashPoint: crashAfter(flags.crashAfter) }),
      onEvent: (event) => onApplyEvent(event, json, progress.update.bind(progress), line, io),
    });
    progress.finish();
    const after = hashes
      ? await tierFileHashes(flags.scheduler, hex, manifest, io.signal, access)
      : undefined;
    const movedByFile = movedPerFile(manifest, result.movedPieces);
    const rows = (after ?? []).map((file, index) =>
      hashRow(file, before?.[index], mode, movedByFile.get(file.path) ?? 0),
    );
    const allMatch = rows.every((row) => row.result === 'match');
    const seconds = (performance.now() - started) / 1000;
    const summary = {
      event: 'done',
      model: `sha256:${hex}`,
      mode,
      passes: result.passes,
      committed: result.committed,
      conflicts: result.conflicts,
      failed: result.failed,
      deleted: result.deleted,
      resumed: result.resumed,
      rolledBack: result.rolledBack,
      seconds,
      files: rows,
    };
    if (json) io.stdout(JSON.stringify(summary) + '\n');
    else io.stdout(renderSummary(summary, rows, hashes));
    if (result.failed > 0 || !allMatch) {
      throw new WeightcastError(
        'SEED_APPLY_FAILED',
        result.failed > 0
          ? `${result.failed} moves failed (their commits did not happen; the old copies stay)`
          : 'the model read back from the tier does not match its hashes from before',
      );
    }
    return 0;
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}

function onApplyEvent(
  event: ApplyEvent,
  json: boolean,
  update: (done: number, total: number) => void,
  line: (data: object, text: string | undefined) => void,
  io: CliIo,
): void {
  switch (event.type) {
    case 'plan':
      if (json)
        io.stdout(
          JSON.stringify({ event: 'plan', pass: event.pass, ...(planToJson(event.plan) as object) }) + '\n',
        );
      else if (event.pass === 1) io.stdout(renderPlanText(event.plan) + '\n');
      else io.stdout(`pass ${event.pass}: ${event.plan.moves.length} moves planned again from the catalog\n`);
      break;
    case 'progress':
      update(event.bytesDone, event.bytesTotal);
      if (json)
        line({ event: 'progress', bytesDone: event.bytesDone, bytesTotal: event.bytesTotal }, undefined);
      break;
    case 'move':
      line(
        { event: 'move', ...event },
        event.outcome === 'committed'
          ? undefined
          : `weightcast: move ${event.id} ${event.outcome}${event.reason ? `: ${event.reason}` : ''}`,
      );
      break;
    case 'recovered':
      line(
        { event: 'recovered', resumed: event.resumed, rolledBack: event.rolledBack },
        `weightcast: an interrupted apply was found: ${event.resumed} committed moves resumed, ${event.rolledBack} uncommitted moves rolled back`,
      );
      break;
    case 'deleted':
      line({ event: 'deleted', ...event }, undefined);
      break;
    case 'waiting-grace':
      line(
        { event: 'waiting-grace', ms: event.ms },
        `weightcast: keeping the old copies ${formatSeconds(event.ms / 1000)} more for readers of the old map`,
      );
      break;
  }
}

interface HashRow {
  file: string;
  size: number;
  mode: string;
  piecesMoved: number;
  sha256Before: string;
  sha256After: string;
  result: 'match' | 'MISMATCH';
}

function hashRow(after: FileHash, before: FileHash | undefined, mode: string, moved: number): HashRow {
  const match = before !== undefined && before.sha256 === after.sha256 && after.badPieces === 0;
  return {
    file: after.path,
    size: after.size,
    mode,
    piecesMoved: moved,
    sha256Before: before?.sha256 ?? '',
    sha256After: after.sha256,
    result: match ? 'match' : 'MISMATCH',
  };
}

function renderSummary(
  summary: {
    committed: number;
    conflicts: number;
    failed: number;
    deleted: number;
    passes: number;
    seconds: number;
    resumed: number;
    rolledBack: number;
  },
  rows: HashRow[],
  hashes: boolean,
): string {
  const lines = [
    `applied in ${formatSeconds(summary.seconds)}: ${summary.committed} moves committed, ${summary.deleted} old copies deleted, ` +
      `${summary.conflicts} conflicts, ${summary.failed} failed (${summary.passes} passes)` +
      (summary.resumed + summary.rolledBack > 0
        ? `; recovered ${summary.resumed} resumed, ${summary.rolledBack} rolled back`
        : ''),
  ];
  if (hashes) {
    const header = ['file', 'size', 'mode', 'pieces moved', 'sha256 before', 'sha256 after', 'result'];
    const cells = rows.map((row) => [
      row.file,
      formatBytes(row.size),
      row.mode,
      String(row.piecesMoved),
      row.sha256Before.slice(0, 12) + '...',
      row.sha256After.slice(0, 12) + '...',
      row.result,
    ]);
    lines.push('', `| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`);
    for (const cell of cells) lines.push(`| ${cell.join(' | ')} |`);
  }
  return lines.join('\n') + '\n';
}

function movedPerFile(manifest: Manifest, pieces: readonly number[]): Map<string, number> {
  const map = new PieceMap(manifest);
  const out = new Map<string, number>();
  for (const piece of pieces) {
    const path = map.locate(piece).file.path;
    out.set(path, (out.get(path) ?? 0) + 1);
  }
  return out;
}

function parseNonNegative(text: string, what: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new WeightcastError('USAGE', `${what} must be a non-negative integer, got ${text}`);
  }
  return value;
}

/** `STEP:N`: kill this process hard the N-th time the apply reaches STEP (tests of crash recovery). */
function crashAfter(text: string): (step: CrashStep) => void {
  const match = /^([a-z]+):(\d+)$/.exec(text);
  const step = match?.[1] as CrashStep | undefined;
  const count = Number(match?.[2]);
  if (step === undefined || !(CRASH_STEPS as readonly string[]).includes(step) || !(count >= 1)) {
    throw new WeightcastError(
      'USAGE',
      `--crash-after must be STEP:N with STEP one of ${CRASH_STEPS.join(', ')}`,
    );
  }
  let seen = 0;
  return (reached) => {
    if (reached !== step || ++seen < count) return;
    process.kill(process.pid, 'SIGKILL');
  };
}
