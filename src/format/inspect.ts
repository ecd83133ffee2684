/**
 * What `weightcast inspect` reports about a model, computed from headers already read: tensors
 * grouped by layer, totals per dtype, and every problem found across the files and the index. Pure:
 * the CLI reads the files and prints the summary; this module only counts and cross-checks, so a
 * broken file or index is a problem in the report, never an exception.
 */

import type { ErrorCode, WeightcastError } from '../errors.js';
import { DTYPES, elementCount, type Dtype } from './dtype.js';
import type { SafetensorsHeader, TensorEntry } from './safetensors.js';

export type InspectedFile =
  { file: string; header: SafetensorsHeader } | { file: string; error: WeightcastError };

export type InspectedIndex =
  { file: string; weightMap: ReadonlyMap<string, string> } | { file: string; error: WeightcastError };

export interface InspectInput {
  /** What the user asked to inspect, shown as is. */
  path: string;
  /** The `model.safetensors.index.json`, when the model has one. */
  index: InspectedIndex | null;
  /** Every safetensors file that exists and was read; shards the index names but that do not exist are left out. */
  files: InspectedFile[];
}

export type InspectProblemKind =
  | 'file-invalid'
  | 'index-invalid'
  | 'shard-missing'
  | 'index-tensor-missing'
  | 'index-wrong-shard'
  | 'tensor-not-indexed'
  | 'tensor-duplicate';

export interface InspectProblem {
  kind: InspectProblemKind;
  /** The error code, for problems that come from a WeightcastError. */
  code?: ErrorCode;
  file?: string;
  tensor?: string;
  message: string;
}

export interface Tally {
  tensorCount: number;
  parameters: number;
  bytes: number;
}

export interface FileSummary extends Tally {
  file: string;
  status: 'ok' | 'invalid' | 'missing';
  /** Null when the file is missing or its header could not be read. */
  fileSize: number | null;
  metadata: Record<string, string> | null;
}

export interface GroupSummary extends Tally {
  /** `model.layers.12` for a layer; the module path (`model.embed_tokens`, `lm_head`) otherwise. */
  name: string;
  layer: number | null;
  dtypes: Dtype[];
}

export interface DtypeSummary extends Tally {
  dtype: Dtype;
}

export interface InspectSummary {
  path: string;
  index: string | null;
  files: FileSummary[];
  groups: GroupSummary[];
  dtypes: DtypeSummary[];
  totals: Tally & { parametersHuman: string };
  problems: InspectProblem[];
}

/** `<prefix>.<layers|layer|h|blocks|block>.<N>.`: the repeated blocks of a transformer. */
const LAYER_PATTERN = /^((?:[^.]+\.)*?(?:layers|layer|h|blocks|block))\.(\d+)\./;

export function summarizeModel(input: InspectInput): InspectSummary {
  const headers = input.files.flatMap((f) => ('header' in f ? [{ file: f.file, header: f.header }] : []));
  const tensors = headers.flatMap(({ header }) => header.tensors);
  const groups = summarizeGroups(tensors);
  const dtypes = summarizeDtypes(tensors);
  const totals = tally(tensors);
  return {
    path: input.path,
    index: input.index?.file ?? null,
    files: summarizeFiles(input),
    groups,
    dtypes,
    totals: { ...totals, parametersHuman: formatParameterCount(totals.parameters) },
    problems: findProblems(input),
  };
}

function parameterCount(tensor: TensorEntry): number {
  return Number(elementCount(tensor.shape));
}

function tally(tensors: readonly TensorEntry[]): Tally {
  let parameters = 0;
  let bytes = 0;
  for (const tensor of tensors) {
    parameters += parameterCount(tensor);
    bytes += tensor.end - tensor.start;
  }
  return { tensorCount: tensors.length, parameters, bytes };
}

function summarizeFiles(input: InspectInput): FileSummary[] {
  const files: FileSummary[] = input.files.map((f) =>
    'header' in f
      ? {
          file: f.file,
          status: 'ok',
          fileSize: f.header.fileSize,
          metadata: f.header.metadata,
          ...tally(f.header.tensors),
        }
      : {
          file: f.file,
          status: 'invalid',
          fileSize: null,
          metadata: null,
          tensorCount: 0,
          parameters: 0,
          bytes: 0,
        },
  );
  for (const shard of missingShards(input)) {
    files.push({
      file: shard,
      status: 'missing',
      fileSize: null,
      metadata: null,
      tensorCount: 0,
      parameters: 0,
      bytes: 0,
    });
  }
  return files.sort((a, b) => compareNatural(a.file, b.file));
}

/** The group a tensor belongs to: its layer, or else the module that owns it. */
export function tensorGroup(name: string): { name: string; layer: number | null } {
  const match = LAYER_PATTERN.exec(name);
  if (match?.[1] !== undefined && match[2] !== undefined) {
    return { name: `${match[1]}.${match[2]}`, layer: Number(match[2]) };
  }
  const lastDot = name.lastIndexOf('.');
  return { name: lastDot > 0 ? name.slice(0, lastDot) : name, layer: null };
}

function summarizeGroups(tensors: readonly TensorEntry[]): GroupSummary[] {
  const groups = new Map<string, { layer: number | null; members: TensorEntry[] }>();
  for (const tensor of tensors) {
    const group = tensorGroup(tensor.name);
    const existing = groups.get(group.name);
    if (existing === undefined) groups.set(group.name, { layer: group.layer, members: [tensor] });
    else existing.members.push(tensor);
  }
  return [...groups]
    .map(([name, { layer, members }]) => ({ name, layer, dtypes: dtypesOf(members), ...tally(members) }))
    .sort((a, b) => compareNatural(a.name, b.name));
}

function dtypesOf(tensors: readonly TensorEntry[]): Dtype[] {
  const present = new Set(tensors.map((t) => t.dtype));
  return DTYPES.filter((dtype) => present.has(dtype));
}

function summarizeDtypes(tensors: readonly TensorEntry[]): DtypeSummary[] {
  return dtypesOf(tensors).map((dtype) => ({ dtype, ...tally(tensors.filter((t) => t.dtype === dtype)) }));
}

function findProblems(input: InspectInput): InspectProblem[] {
  const problems: InspectProblem[] = [];
  if (input.index !== null && 'error' in input.index)
    problems.push(errorProblem('index-invalid', input.index));
  for (const shard of missingShards(input)) {
    problems.push({
      kind: 'shard-missing',
      file: shard,
      message: `${shard}: named by the index but does not exist`,
    });
  }
  for (const file of input.files) {
    if ('error' in file) problems.push(errorProblem('file-invalid', file));
  }
  const locations = tensorLocations(input.files);
  for (const [tensor, files] of locations) {
    if (files.length > 1) {
      problems.push({
        kind: 'tensor-duplicate',
        tensor,
        message: `tensor ${tensor} is in ${files.join(' and ')}`,
      });
    }
  }
  if (input.index !== null && 'weightMap' in input.index) {
    problems.push(...indexProblems(input.index.weightMap, input.files, locations));
  }
  return problems;
}

function errorProblem(
  kind: InspectProblemKind,
  failed: { file: string; error: WeightcastError },
): InspectProblem {
  const { error } = failed;
  const problem: InspectProblem = { kind, code: error.code, file: failed.file, message: error.message };
  if (typeof error.details.tensor === 'string') problem.tensor = error.details.tensor;
  return problem;
}

function missingShards(input: InspectInput): string[] {
  if (input.index === null || !('weightMap' in input.index)) return [];
  const present = new Set(input.files.map((f) => f.file));
  return [...new Set(input.index.weightMap.values())]
    .filter((shard) => !present.has(shard))
    .sort(compareNatural);
}

/** Tensor name to the files whose headers declare it. */
function tensorLocations(files: readonly InspectedFile[]): Map<string, string[]> {
  const locations = new Map<string, string[]>();
  for (const f of files) {
    if (!('header' in f)) continue;
    for (const tensor of f.header.tensors) {
      const found = locations.get(tensor.name);
      if (found === undefined) locations.set(tensor.name, [f.file]);
      else found.push(f.file);
    }
  }
  return locations;
}

/**
 * Cross-checks the index against the headers. Entries pointing into a shard that is missing or
 * unreadable are skipped: that shard is already reported, and its contents are unknown.
 */
function indexProblems(
  weightMap: ReadonlyMap<string, string>,
  files: readonly InspectedFile[],
  locations: ReadonlyMap<string, string[]>,
): InspectProblem[] {
  const problems: InspectProblem[] = [];
  const readable = new Set(files.flatMap((f) => ('header' in f ? [f.file] : [])));
  for (const [tensor, shard] of weightMap) {
    if (!readable.has(shard)) continue;
    const found = locations.get(tensor) ?? [];
    if (found.includes(shard)) continue;
    if (found.length === 0) {
      problems.push({
        kind: 'index-tensor-missing',
        file: shard,
        tensor,
        message: `index maps tensor ${tensor} to ${shard}, but no file has it`,
      });
    } else {
      problems.push({
        kind: 'index-wrong-shard',
        file: shard,
        tensor,
        message: `index maps tensor ${tensor} to ${shard}, but it is in ${found.join(', ')}`,
      });
    }
  }
  for (const f of files) {
    if (!('header' in f)) continue;
    for (const tensor of f.header.tensors) {
      if (weightMap.has(tensor.name)) continue;
      problems.push({
        kind: 'tensor-not-indexed',
        file: f.file,
        tensor: tensor.name,
        message: `tensor ${tensor.name} in ${f.file} is not listed in the index`,
      });
    }
  }
  return problems;
}

const PARAMETER_UNITS: ReadonlyArray<[number, string]> = [
  [1e12, 'T'],
  [1e9, 'B'],
  [1e6, 'M'],
  [1e3, 'K'],
];

/** 8030261248 -> `8.03B`: three significant digits in the largest unit that keeps the value >= 1. */
export function formatParameterCount(count: number): string {
  for (const [scale, suffix] of PARAMETER_UNITS) {
    const rounded = (count / scale).toPrecision(3);
    if (Number(rounded) >= 1) return `${rounded}${suffix}`;
  }
  return String(count);
}

/** Orders `layers.2` before `layers.10`: digit runs compare as numbers, everything else as text. */
export function compareNatural(a: string, b: string): number {
  const partsA = a.split(/(\d+)/);
  const partsB = b.split(/(\d+)/);
  for (let i = 0; i < Math.min(partsA.length, partsB.length); i++) {
    const x = partsA[i] ?? '';
    const y = partsB[i] ?? '';
    if (x === y) continue;
    // split() with a capture group puts digit runs at odd indexes.
    if (i % 2 === 1 && Number(x) !== Number(y)) return Number(x) - Number(y);
    return x < y ? -1 : 1;
  }
  return partsA.length - partsB.length;
}
