/**
 * `weightcast inspect PATH [--json]`: what a safetensors file or a Hugging Face model directory holds
 * (tensors by layer, dtype totals, parameter count) and every problem with its files and index. This
 * module finds and reads the headers; src/format/inspect.ts counts and cross-checks them. Exit code 0
 * when nothing is wrong, 1 when problems were found, 2 when PATH cannot be inspected at all.
 */

import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { WeightcastError, isWeightcastError } from '../../errors.js';
import { INDEX_FILE_NAME } from '../../format/index-json.js';
import { readIndexJson } from '../../format/index-json-file.js';
import {
  compareNatural,
  formatParameterCount,
  summarizeModel,
  type InspectInput,
  type InspectSummary,
  type InspectedFile,
  type InspectedIndex,
} from '../../format/inspect.js';
import { readSafetensorsHeaderFromFile } from '../../format/safetensors.js';
import { formatBytes } from '../../util/units.js';
import { EXIT_FAILURE, EXIT_OK, reportError, type CliIo } from '../io.js';
import { printable, textTable } from '../../util/text-table.js';

export interface InspectFlags {
  json?: boolean;
}

/** Past this many, the text output summarises; --json always lists every problem. */
const PROBLEM_LINES_MAX = 50;
const SAFETENSORS_SUFFIX = '.safetensors';

export async function inspectCommand(path: string, flags: InspectFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  try {
    const summary = summarizeModel(await gatherInput(path, io.signal));
    const ok = summary.problems.length === 0;
    if (json) io.stdout(JSON.stringify({ event: 'inspect', ok, ...summary }) + '\n');
    else io.stdout(renderText(summary));
    return ok ? EXIT_OK : EXIT_FAILURE;
  } catch (error) {
    return reportError(io, error, json);
  }
}

async function gatherInput(path: string, signal: AbortSignal): Promise<InspectInput> {
  const info = await stat(path).catch(() => null);
  if (info === null) throw new WeightcastError('USAGE', `${path} does not exist`, { file: path });
  if (info.isDirectory()) return gatherDirectory(path, path, signal);
  if (!info.isFile()) {
    throw new WeightcastError('USAGE', `${path} is not a file or directory`, { file: path });
  }
  // Pointing at the index means the model directory that holds it.
  if (basename(path) === INDEX_FILE_NAME) return gatherDirectory(dirname(path), path, signal);
  return { path, index: null, files: [await inspectFile(path, path, signal)] };
}

/**
 * With a readable index, the shards are the files it names; without one (or when it is broken), every
 * `.safetensors` file at the top of the directory.
 */
async function gatherDirectory(dir: string, shownPath: string, signal: AbortSignal): Promise<InspectInput> {
  const names = (await readdir(dir)).sort(compareNatural);
  const index = names.includes(INDEX_FILE_NAME) ? await inspectIndex(dir, signal) : null;
  const shards =
    index !== null && 'weightMap' in index
      ? [...new Set(index.weightMap.values())].sort(compareNatural)
      : names.filter((name) => name.endsWith(SAFETENSORS_SUFFIX));
  if (shards.length === 0 && index === null) {
    throw new WeightcastError(
      'USAGE',
      `${dir} holds no ${SAFETENSORS_SUFFIX} files and no ${INDEX_FILE_NAME}`,
      {
        file: dir,
      },
    );
  }
  const files: InspectedFile[] = [];
  for (const shard of shards) {
    // A shard that does not exist is not read; the summary reports it missing from the index.
    if (await isMissing(join(dir, shard))) continue;
    files.push(await inspectFile(join(dir, shard), shard, signal));
  }
  return { path: shownPath, index, files };
}

async function inspectIndex(dir: string, signal: AbortSignal): Promise<InspectedIndex> {
  try {
    const index = await readIndexJson(join(dir, INDEX_FILE_NAME), { signal });
    return { file: INDEX_FILE_NAME, weightMap: index.weightMap };
  } catch (error) {
    return { file: INDEX_FILE_NAME, error: asProblem(error, join(dir, INDEX_FILE_NAME)) };
  }
}

async function inspectFile(path: string, shown: string, signal: AbortSignal): Promise<InspectedFile> {
  try {
    return { file: shown, header: await readSafetensorsHeaderFromFile(path, { signal }) };
  } catch (error) {
    return { file: shown, error: asProblem(error, path) };
  }
}

/** A file that cannot be read is a problem to report; an abort still stops the whole command. */
function asProblem(error: unknown, path: string): WeightcastError {
  if (isWeightcastError(error, 'ABORTED')) throw error;
  if (isWeightcastError(error)) return error;
  const reason = error instanceof Error ? error.message : String(error);
  return new WeightcastError('IO', `${path}: cannot read: ${reason}`, { file: path }, { cause: error });
}

async function isMissing(path: string): Promise<boolean> {
  try {
    await stat(path);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

function renderText(summary: InspectSummary): string {
  const { totals } = summary;
  const exact = totals.parameters.toLocaleString('en-US');
  const headline =
    `${summary.path}: ${totals.parametersHuman} parameters (${exact}) in ${totals.tensorCount} tensors, ` +
    `${formatBytes(totals.bytes)}${summary.index === null ? '' : `; index ${summary.index}`}`;
  const sections = [
    [headline],
    fileTable(summary),
    groupTable(summary),
    dtypeTable(summary),
    problemLines(summary),
  ];
  // A table with no rows (every file failed) is left out rather than printed as a bare heading.
  const shown = sections.filter((lines) => lines.length > 0);
  return shown.map((lines) => lines.map(printable).join('\n')).join('\n\n') + '\n';
}

function fileTable(summary: InspectSummary): string[] {
  const rows = summary.files.map((f) => [
    f.file,
    f.status,
    f.fileSize === null ? '-' : formatBytes(f.fileSize),
    String(f.tensorCount),
    formatParameterCount(f.parameters),
  ]);
  return textTable(['FILE', 'STATUS', 'SIZE', 'TENSORS', 'PARAMETERS'], rows, [2, 3, 4]);
}

function groupTable(summary: InspectSummary): string[] {
  if (summary.groups.length === 0) return [];
  const rows = summary.groups.map((g) => [
    g.name,
    String(g.tensorCount),
    formatParameterCount(g.parameters),
    formatBytes(g.bytes),
    g.dtypes.join(','),
  ]);
  return textTable(['GROUP', 'TENSORS', 'PARAMETERS', 'BYTES', 'DTYPES'], rows, [1, 2, 3]);
}

function dtypeTable(summary: InspectSummary): string[] {
  if (summary.dtypes.length === 0) return [];
  const rows = summary.dtypes.map((d) => [
    d.dtype,
    String(d.tensorCount),
    formatParameterCount(d.parameters),
    formatBytes(d.bytes),
  ]);
  return textTable(['DTYPE', 'TENSORS', 'PARAMETERS', 'BYTES'], rows, [1, 2, 3]);
}

function problemLines(summary: InspectSummary): string[] {
  const { problems } = summary;
  if (problems.length === 0) return ['No problems found.'];
  const shown = problems.slice(0, PROBLEM_LINES_MAX);
  const kindWidth = Math.max(...shown.map((p) => p.kind.length));
  const lines = [`${problems.length} problem${problems.length === 1 ? '' : 's'}:`];
  for (const p of shown) {
    lines.push(`  ${p.kind.padEnd(kindWidth)}  ${p.code === undefined ? '' : `${p.code}: `}${p.message}`);
  }
  if (problems.length > shown.length)
    lines.push(`  ... and ${problems.length - shown.length} more (--json lists all)`);
  return lines;
}
