/**
 * The Python reader (`python/weightcast_reader.py`) checked against the TypeScript side. TypeScript
 * writes the files (synthetic checkpoints in every synth dtype, and a hand-made file with every dtype
 * weightcast knows), parses their headers and computes, per tensor, the SHA-256 of its bytes and the
 * float64 sum of its first elements decoded with `src/format/float-bits.ts`; Python must print the same.
 * Python also reports where each tensor's memory is, which proves it points into the file's mapping.
 *
 * Needs a Python with torch: `WEIGHTCAST_PYTHON`, or Debian's python3-torch in /usr/bin/python3. Without
 * one every test here is skipped with the reason. Python starts are batched: importing torch takes
 * seconds on a small machine.
 */

import { after, before, describe, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isWeightcastError } from '../../src/errors.js';
import { elementCount, type Dtype } from '../../src/format/dtype.js';
import { parseSafetensorsBuffer, type TensorEntry } from '../../src/format/safetensors.js';
import { SafetensorsFileWriter, planSafetensorsLayout } from '../../src/format/safetensors-writer.js';
import {
  decodeBf16,
  decodeE4m3,
  decodeF16,
  encodeBf16,
  encodeE4m3,
  encodeF16,
} from '../../src/format/float-bits.js';
import { synthesizeModel, type SynthArch, type SynthDtype } from '../../src/synth/index.js';

const PYTHON = process.env['WEIGHTCAST_PYTHON'] ?? '/usr/bin/python3';
const PYTHON_DIR = fileURLToPath(new URL('../../../python/', import.meta.url));
const READER = join(PYTHON_DIR, 'weightcast_reader.py');
const FIRST_COUNT = 16;
const PYTHON_TIMEOUT_MS = 60_000;

/** Why the Python tests cannot run here, or undefined when they can. */
function torchProblem(): string | undefined {
  // find_spec locates torch without importing it, which alone takes seconds on a small machine.
  const probe = spawnSync(
    PYTHON,
    ['-c', 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'],
    {
      encoding: 'utf8',
      timeout: PYTHON_TIMEOUT_MS,
    },
  );
  if (probe.error !== undefined)
    return `${PYTHON} cannot run (${probe.error.message}); set WEIGHTCAST_PYTHON`;
  if (probe.status !== 0) {
    return `${PYTHON} has no torch (apt-get install python3-torch, or set WEIGHTCAST_PYTHON)`;
  }
  return undefined;
}

const skipReason = torchProblem();

/** Runs the test body only when Python with torch exists; otherwise skips it, saying why. */
function withTorch(body: (t: TestContext) => Promise<void> | void): (t: TestContext) => Promise<void> {
  return async (t) => {
    if (skipReason !== undefined) {
      t.skip(skipReason);
      return;
    }
    await body(t);
  };
}

interface PythonRun {
  status: number | null;
  stdout: string;
  stderr: string;
}

function runPython(args: readonly string[]): Promise<PythonRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: PYTHON_TIMEOUT_MS,
      env: { ...process.env, PYTHONPATH: PYTHON_DIR, PYTHONDONTWRITEBYTECODE: '1' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, stdout, stderr }));
  });
}

async function runPythonOk(args: readonly string[]): Promise<string> {
  const run = await runPython(args);
  assert.equal(run.status, 0, `python ${args.slice(0, 2).join(' ')} failed:\n${run.stderr.slice(-3000)}`);
  return run.stdout;
}

function jsonLines<T>(text: string): T[] {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as T);
}

/** One line of `weightcast_reader.py --summary`. */
interface SummaryLine {
  path: string;
  file: string;
  name: string;
  dtype: string;
  torch_dtype: string | null;
  raw: boolean;
  shape: number[];
  bytes: number;
  sha256: string;
  first_count: number | null;
  first_sum: number | string | null;
  copied: boolean;
  in_mapping: boolean | null;
  storage_in_mapping: boolean | null;
}

// ---------------------------------------------------------------------------------------------------
// The TypeScript side's reference values.

/** Decodes element `index` of a tensor as a float64, or returns undefined where no float applies. */
function decodeElement(bytes: Buffer, dtype: Dtype, index: number): number | undefined {
  switch (dtype) {
    case 'F64':
      return bytes.readDoubleLE(index * 8);
    case 'F32':
      return bytes.readFloatLE(index * 4);
    case 'F16':
      return decodeF16(bytes.readUInt16LE(index * 2));
    case 'BF16':
      return decodeBf16(bytes.readUInt16LE(index * 2));
    case 'F8_E4M3':
      return decodeE4m3(bytes.readUInt8(index));
    case 'F8_E5M2':
      // E5M2 is the upper byte of an IEEE half: same sign, exponent and bias.
      return decodeF16(bytes.readUInt8(index) << 8);
    case 'I64':
      return Number(bytes.readBigInt64LE(index * 8));
    case 'U64':
      return Number(bytes.readBigUInt64LE(index * 8));
    case 'I32':
      return bytes.readInt32LE(index * 4);
    case 'U32':
      return bytes.readUInt32LE(index * 4);
    case 'I16':
      return bytes.readInt16LE(index * 2);
    case 'U16':
      return bytes.readUInt16LE(index * 2);
    case 'I8':
      return bytes.readInt8(index);
    case 'U8':
    case 'BOOL':
      return bytes.readUInt8(index);
    default:
      return undefined;
  }
}

/** Python prints non-finite sums as `str(float)`. */
function pythonNumber(value: number): number | string {
  if (Number.isNaN(value)) return 'nan';
  if (value === Infinity) return 'inf';
  if (value === -Infinity) return '-inf';
  return value;
}

interface Expected {
  path: string;
  name: string;
  dtype: Dtype;
  shape: number[];
  bytes: number;
  sha256: string;
  firstSum: number | string | null;
}

async function expectedTensors(path: string): Promise<Expected[]> {
  const file = await readFile(path);
  const header = parseSafetensorsBuffer(file, path);
  return header.tensors.map((entry) => expectedTensor(path, file, entry));
}

function expectedTensor(path: string, file: Buffer, entry: TensorEntry): Expected {
  const bytes = file.subarray(entry.start, entry.end);
  const count = Math.min(FIRST_COUNT, Number(elementCount(entry.shape)));
  let firstSum: number | null = 0;
  for (let index = 0; index < count && firstSum !== null; index++) {
    const value = decodeElement(bytes, entry.dtype, index);
    firstSum = value === undefined ? null : firstSum + value;
  }
  return {
    path,
    name: entry.name,
    dtype: entry.dtype,
    shape: entry.shape,
    bytes: entry.end - entry.start,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    firstSum: firstSum === null ? null : pythonNumber(firstSum),
  };
}

function assertMatches(line: SummaryLine | undefined, expected: Expected): void {
  const where = `${expected.path} ${expected.name}`;
  assert.ok(line !== undefined, `python did not report ${where}`);
  assert.equal(line.dtype, expected.dtype, where);
  assert.deepEqual(line.shape, expected.shape, where);
  assert.equal(line.bytes, expected.bytes, where);
  assert.equal(line.sha256, expected.sha256, `${where}: bytes differ`);
  assert.equal(line.first_sum, expected.firstSum, `${where}: leading values differ`);
}

// ---------------------------------------------------------------------------------------------------
// Files the tests write.

/** Every dtype weightcast knows, with values that decode to known numbers (finite, some negative). */
const FLOATS = [0.5, -1.25, 3, 0.001, -7.5, 100, 0.2, -0.0625, 2.75, -3.5, 12, 0.125, -0.9, 6, 1e-3, -40];
const DTYPE_CASES: { name: string; dtype: Dtype; shape: number[]; bytes: () => Buffer }[] = [
  {
    name: 'f64',
    dtype: 'F64',
    shape: [4, 5],
    bytes: () => fill(20, 8, (b, i, v) => b.writeDoubleLE(v, i * 8)),
  },
  {
    name: 'f32',
    dtype: 'F32',
    shape: [3, 7],
    bytes: () => fill(21, 4, (b, i, v) => b.writeFloatLE(v, i * 4)),
  },
  {
    name: 'f16',
    dtype: 'F16',
    shape: [2, 3, 4],
    bytes: () => fill(24, 2, (b, i, v) => b.writeUInt16LE(encodeF16(v), i * 2)),
  },
  {
    name: 'bf16',
    dtype: 'BF16',
    shape: [17],
    bytes: () => fill(17, 2, (b, i, v) => b.writeUInt16LE(encodeBf16(v), i * 2)),
  },
  {
    name: 'f8_e4m3',
    dtype: 'F8_E4M3',
    shape: [4, 8],
    bytes: () => fill(32, 1, (b, i, v) => b.writeUInt8(encodeE4m3(v), i)),
  },
  {
    name: 'f8_e5m2',
    dtype: 'F8_E5M2',
    shape: [3, 3],
    bytes: () => fill(9, 1, (b, i, v) => b.writeUInt8(encodeF16(v) >> 8, i)),
  },
  {
    name: 'i64',
    dtype: 'I64',
    shape: [3],
    bytes: () => ints(3, 8, (b, i) => b.writeBigInt64LE(BigInt(i - 1) * (2n ** 40n + 3n), i * 8)),
  },
  {
    name: 'i32',
    dtype: 'I32',
    shape: [5],
    bytes: () => ints(5, 4, (b, i) => b.writeInt32LE((i - 2) * 70000, i * 4)),
  },
  {
    name: 'i16',
    dtype: 'I16',
    shape: [5],
    bytes: () => ints(5, 2, (b, i) => b.writeInt16LE((i - 2) * 300, i * 2)),
  },
  { name: 'i8', dtype: 'I8', shape: [6], bytes: () => ints(6, 1, (b, i) => b.writeInt8(i * 25 - 128, i)) },
  { name: 'u8', dtype: 'U8', shape: [2, 9], bytes: () => ints(18, 1, (b, i) => b.writeUInt8(i * 14, i)) },
  {
    name: 'bool',
    dtype: 'BOOL',
    shape: [7],
    bytes: () => ints(7, 1, (b, i) => b.writeUInt8(i % 3 === 0 ? 1 : 0, i)),
  },
  {
    name: 'u16',
    dtype: 'U16',
    shape: [3],
    bytes: () => ints(3, 2, (b, i) => b.writeUInt16LE(65535 - i, i * 2)),
  },
  {
    name: 'u32',
    dtype: 'U32',
    shape: [3],
    bytes: () => ints(3, 4, (b, i) => b.writeUInt32LE(4e9 + i, i * 4)),
  },
  {
    name: 'u64',
    dtype: 'U64',
    shape: [2],
    bytes: () => ints(2, 8, (b, i) => b.writeBigUInt64LE(2n ** 63n + 5n * BigInt(i), i * 8)),
  },
  { name: 'c64', dtype: 'C64', shape: [2], bytes: () => fill(4, 4, (b, i, v) => b.writeFloatLE(v, i * 4)) },
  { name: 'f4', dtype: 'F4', shape: [6], bytes: () => Buffer.from([0x12, 0x34, 0x56]) },
  { name: 'scalar', dtype: 'F32', shape: [], bytes: () => fill(1, 4, (b, i, v) => b.writeFloatLE(v, i * 4)) },
  { name: 'empty', dtype: 'F32', shape: [0, 4], bytes: () => Buffer.alloc(0) },
];

function fill(
  count: number,
  width: number,
  write: (buffer: Buffer, index: number, value: number) => void,
): Buffer {
  const buffer = Buffer.alloc(count * width);
  for (let index = 0; index < count; index++) write(buffer, index, FLOATS[index % FLOATS.length] ?? 0);
  return buffer;
}

function ints(count: number, width: number, write: (buffer: Buffer, index: number) => void): Buffer {
  const buffer = Buffer.alloc(count * width);
  for (let index = 0; index < count; index++) write(buffer, index);
  return buffer;
}

async function writeEveryDtype(path: string): Promise<void> {
  const layout = planSafetensorsLayout(
    DTYPE_CASES.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    { format: 'pt' },
  );
  const writer = await SafetensorsFileWriter.create(path, layout);
  for (const planned of layout.tensors) {
    const spec = DTYPE_CASES.find((c) => c.name === planned.name);
    assert.ok(spec !== undefined);
    const bytes = spec.bytes();
    assert.equal(bytes.length, planned.end - planned.begin, `test data for ${spec.name}`);
    await writer.write(bytes);
  }
  await writer.close();
}

/** A file made byte by byte: 8-byte length, the header text as given, then the data bytes. */
function rawFile(header: string | Buffer, data: Buffer | number, length?: bigint): Buffer {
  const text = typeof header === 'string' ? Buffer.from(header, 'utf8') : header;
  const body = typeof data === 'number' ? Buffer.alloc(data) : data;
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(length ?? BigInt(text.length));
  return Buffer.concat([prefix, text, body]);
}

function entry(dtype: string, shape: unknown, offsets: unknown): string {
  return `{"dtype":${JSON.stringify(dtype)},"shape":${JSON.stringify(shape)},"data_offsets":${JSON.stringify(offsets)}}`;
}

/** Valid safetensors whose F32 and F16 tensors start at odd offsets: readable only through a copy. */
function misalignedFile(): Buffer {
  const data = Buffer.alloc(1 + 8 + 4);
  data.writeUInt8(7, 0);
  data.writeFloatLE(1.5, 1);
  data.writeFloatLE(-2.25, 5);
  data.writeUInt16LE(encodeF16(0.75), 9);
  data.writeUInt16LE(encodeF16(-4), 11);
  const header = `{"u8":${entry('U8', [1], [0, 1])},"f32":${entry('F32', [2], [1, 9])},"f16":${entry('F16', [2], [9, 13])}}`;
  // Padded so the data starts at a multiple of 8, as writers do: the odd offsets stay odd in the file.
  return rawFile(header.padEnd(Math.ceil(header.length / 8) * 8, ' '), data);
}

// ---------------------------------------------------------------------------------------------------

const SYNTH_MODELS: { arch: SynthArch; dtype: SynthDtype }[] = [
  { arch: 'llama', dtype: 'bf16' },
  { arch: 'llama', dtype: 'f16' },
  { arch: 'llama', dtype: 'f32' },
  { arch: 'llama', dtype: 'f8_e4m3' },
  { arch: 'deepseek-v3', dtype: 'f8_e4m3' },
];

/** Directory cases: the path and what opening it in Python must give (tensor names, or a code). */
async function writeDirectoryCases(scratch: string): Promise<[string, string][]> {
  const dirWith = async (
    name: string,
    /** File name to its tensors' names, comma-separated; each tensor is one U8. */
    files: Record<string, string>,
    index?: Record<string, string>,
  ): Promise<string> => {
    const dir = join(scratch, name);
    await mkdir(dir);
    for (const [file, tensors] of Object.entries(files)) {
      const names = tensors.split(',');
      const entries = names.map((tensor, i) => `${JSON.stringify(tensor)}:${entry('U8', [1], [i, i + 1])}`);
      await writeFile(join(dir, file), rawFile(`{${entries.join(',')}}`, names.length));
    }
    if (index !== undefined) await writeIndex(dir, index);
    return dir;
  };
  const plain = await dirWith('dir-plain', { 'a.safetensors': 'x', 'b.safetensors': 'y' });
  await writeFile(join(plain, 'notes.txt'), 'not a tensor file');
  // The index is authoritative: a stray file it does not name is not opened.
  const indexed = await dirWith(
    'dir-indexed',
    { 'a.safetensors': 'x', 'stray.safetensors': 'x' },
    { x: 'a.safetensors' },
  );
  const twoShards = { 'a.safetensors': 'x', 'b.safetensors': 'y' };
  return [
    [plain, 'x,y'],
    [indexed, 'x'],
    [
      await dirWith('dir-dup', { 'a.safetensors': 'x', 'b.safetensors': 'x' }),
      'SAFETENSORS_DUPLICATE_TENSOR',
    ],
    [await dirWith('dir-escape', { 'a.safetensors': 'x' }, { x: '../a.safetensors' }), 'INDEX_INVALID'],
    [await dirWith('dir-wrong', twoShards, { x: 'b.safetensors', y: 'b.safetensors' }), 'INDEX_INVALID'],
    [await dirWith('dir-unlisted', { 'a.safetensors': 'x,z' }, { x: 'a.safetensors' }), 'INDEX_INVALID'],
    [await dirWith('dir-empty', {}), 'NOT_FOUND'],
  ];
}

async function writeSynthModels(scratch: string): Promise<string[]> {
  const dirs: string[] = [];
  for (const [index, model] of SYNTH_MODELS.entries()) {
    const dir = join(scratch, `${model.arch}-${model.dtype}`);
    await synthesizeModel({
      dir,
      ...model,
      hidden: 64,
      layers: 2,
      heads: 4,
      vocab: 320,
      ...(model.arch === 'deepseek-v3' ? { experts: 4 } : {}),
      seed: 40 + index,
    });
    dirs.push(dir);
  }
  return dirs;
}

async function safetensorsFiles(path: string): Promise<string[]> {
  if (path.endsWith('.safetensors')) return [path];
  return (await readdir(path))
    .filter((name) => name.endsWith('.safetensors'))
    .map((name) => join(path, name));
}

describe('python reader (weightcast_reader.py)', () => {
  let scratch = '';
  /** Written in `before` and read by Python in two processes, since each Python start imports torch. */
  const summaryPaths: string[] = [];
  let summary = new Map<string, SummaryLine>();
  let directoryCases: [string, string][] = [];
  const hostilePaths: string[] = [];
  let outcomes: string[] = [];

  before(async () => {
    // /dev/shm is where `weightcast load --format shm` puts its files; use it when the machine has one.
    scratch = await mkdtemp(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'weightcast-python-'));
    if (skipReason !== undefined) return;
    summaryPaths.push(...(await writeSynthModels(scratch)));
    summaryPaths.push(join(scratch, 'every-dtype.safetensors'), join(scratch, 'misaligned.safetensors'));
    await writeEveryDtype(join(scratch, 'every-dtype.safetensors'));
    await writeFile(join(scratch, 'misaligned.safetensors'), misalignedFile());
    directoryCases = await writeDirectoryCases(scratch);
    await mkdir(join(scratch, 'hostile'));
    for (const [name, bytes] of HOSTILE) {
      hostilePaths.push(join(scratch, 'hostile', `${name}.safetensors`));
      await writeFile(join(scratch, 'hostile', `${name}.safetensors`), bytes);
    }
    const [summaryText, outcomeList] = await Promise.all([
      runPythonOk([READER, '--summary', ...summaryPaths]),
      codesFromPython([...directoryCases.map(([path]) => path), ...hostilePaths]),
    ]);
    summary = new Map(
      jsonLines<SummaryLine>(summaryText).map((line) => [`${line.path}\0${line.name}`, line]),
    );
    outcomes = outcomeList;
  });
  after(() => rm(scratch, { recursive: true, force: true }));

  test(
    'synthetic checkpoints and every dtype: bytes and leading values match TypeScript, zero-copy',
    withTorch(async () => {
      const dtypesSeen = new Set<string>();
      let compared = 0;
      for (const path of summaryPaths.filter((p) => !p.endsWith('misaligned.safetensors'))) {
        for (const file of await safetensorsFiles(path)) {
          for (const expected of await expectedTensors(file)) {
            const line = summary.get(`${file}\0${expected.name}`);
            assertMatches(line, expected);
            assert.ok(line !== undefined);
            assertZeroCopy(line);
            dtypesSeen.add(line.dtype);
            compared++;
          }
        }
      }
      const misaligned = [...summary.values()].filter((line) => line.file === 'misaligned.safetensors');
      assert.equal(
        summary.size - misaligned.length,
        compared,
        'python reported tensors TypeScript does not know',
      );
      for (const dtype of ['F64', 'F32', 'F16', 'BF16', 'I64', 'I32', 'I16', 'I8', 'U8', 'BOOL']) {
        assert.ok(dtypesSeen.has(dtype), `no ${dtype} tensor was compared`);
      }
      const lines = [...summary.values()];
      assert.equal(lines.find((line) => line.dtype === 'BF16')?.torch_dtype, 'bfloat16');
      for (const [dtype, torchName] of [
        ['F8_E4M3', 'float8_e4m3fn'],
        ['F8_E5M2', 'float8_e5m2'],
      ]) {
        const fp8 = lines.find((line) => line.dtype === dtype);
        assert.ok(fp8 !== undefined, `no ${dtype} tensor was compared`);
        // Raw bytes plus the dtype name when this torch predates FP8; a real FP8 tensor otherwise.
        assert.equal(fp8.torch_dtype, fp8.raw ? null : torchName);
      }
      assert.equal(lines.find((line) => line.dtype === 'F4')?.raw, true, 'F4 is packed: raw bytes');
    }),
  );

  test(
    'a tensor at a misaligned offset is copied, flagged, and still right',
    withTorch(async () => {
      const path = join(scratch, 'misaligned.safetensors');
      for (const expected of await expectedTensors(path)) {
        const line = summary.get(`${path}\0${expected.name}`);
        assertMatches(line, expected);
        assert.ok(line !== undefined);
        assert.equal(line.copied, expected.dtype !== 'U8', `${line.name} copied`);
        assert.equal(line.in_mapping, expected.dtype === 'U8', `${line.name} in the mapping`);
      }
    }),
  );

  test(
    'directories: every file, or exactly the files the index names; duplicates and bad shard names refused',
    withTorch(() => {
      assert.deepEqual(
        outcomes.slice(0, directoryCases.length),
        directoryCases.map(([, outcome]) => outcome),
      );
    }),
  );

  test(
    'hostile headers raise WeightcastReaderError with the code the TypeScript parser gives',
    withTorch(() => {
      const results = outcomes.slice(directoryCases.length);
      for (const [index, [name, bytes, code]] of HOSTILE.entries()) {
        assert.equal(typescriptCode(bytes, name), code, `TypeScript on ${name}`);
        assert.equal(results[index], code, `python on ${name}`);
      }
    }),
  );

  test(
    'tensors outlive the file object; the mapping goes with the last tensor; writes never reach the file',
    withTorch(async () => {
      const path = join(scratch, 'lifetime.safetensors');
      await writeEveryDtype(path);
      const before = createHash('sha256')
        .update(await readFile(path))
        .digest('hex');
      const report = JSON.parse(await runPythonOk(['-c', LIFETIME_SCRIPT, path])) as Record<string, unknown>;
      assert.deepEqual(report, {
        mappedWhileOpen: 1,
        mappedAfterClose: 1,
        valueAfterClose: 0.5,
        valueAfterWrite: 42,
        mappedAfterLastTensor: 0,
        freshValue: 0.5,
        readOnlyInMapping: true,
      });
      const afterWrite = createHash('sha256')
        .update(await readFile(path))
        .digest('hex');
      assert.equal(afterWrite, before, 'a write to a tensor changed the file');
    }),
  );

  test(
    'the command line reports bad input as one JSON error line and exit code 2',
    withTorch(async () => {
      const path = join(scratch, 'bad.safetensors');
      await writeFile(path, rawFile('[]', 0));
      const run = await runPython([READER, '--summary', path]);
      assert.equal(run.status, 2);
      assert.equal(run.stdout, '');
      const error = JSON.parse(run.stderr) as { error: string; message: string };
      assert.equal(error.error, 'SAFETENSORS_INVALID_HEADER_START');
      assert.match(error.message, /bad\.safetensors/);
    }),
  );
});

async function writeIndex(dir: string, weightMap: Record<string, string>): Promise<void> {
  await writeFile(
    join(dir, 'model.safetensors.index.json'),
    JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }),
  );
}

function assertZeroCopy(line: SummaryLine): void {
  const where = `${line.path} ${line.name}`;
  assert.equal(line.copied, false, `${where} was copied`);
  if (line.bytes === 0) return;
  assert.equal(line.in_mapping, true, `${where}: data_ptr outside the file's mapping`);
  assert.equal(line.storage_in_mapping, true, `${where}: storage outside the file's mapping`);
  assert.equal(line.raw, line.torch_dtype === null, where);
}

function typescriptCode(bytes: Buffer, path: string): string {
  try {
    parseSafetensorsBuffer(bytes, path);
    return 'accepted';
  } catch (error) {
    if (isWeightcastError(error)) return error.code;
    throw error;
  }
}

/** Opens each path in Python (file or directory), builds every tensor, and returns the outcome. */
async function codesFromPython(paths: readonly string[]): Promise<string[]> {
  const stdout = await runPythonOk(['-c', OUTCOME_SCRIPT, ...paths]);
  return jsonLines<{ outcome: string }>(stdout).map((line) => line.outcome);
}

/** Success prints the tensor names; a WeightcastReaderError its code; anything else is a bug. */
const OUTCOME_SCRIPT = `
import json, os, sys
import weightcast_reader as reader
for path in sys.argv[1:]:
    try:
        opened = reader.open_dir(path) if os.path.isdir(path) else reader.open_file(path)
        opened.tensors()
        outcome = ",".join(opened.keys())
    except reader.WeightcastReaderError as error:
        outcome = error.code
    except Exception as error:
        outcome = "UNEXPECTED " + type(error).__name__ + ": " + str(error)
    print(json.dumps({"outcome": outcome}))
`;

/** Counts the file's mappings in /proc/self/maps at each step of a tensor's life. */
const LIFETIME_SCRIPT = `
import gc, json, os, sys
import weightcast_reader as reader
path = os.path.realpath(sys.argv[1])
def mapped():
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.rstrip().endswith(" " + path))
report = {}
file = reader.open_file(path)
tensor = file.tensor("f32")
report["mappedWhileOpen"] = mapped()
file.close()
del file
gc.collect()
report["mappedAfterClose"] = mapped()
report["valueAfterClose"] = float(tensor[0, 0])
tensor[0, 0] = 42
report["valueAfterWrite"] = float(tensor[0, 0])
del tensor
gc.collect()
report["mappedAfterLastTensor"] = mapped()
report["freshValue"] = float(reader.load_file(path)["f32"][0, 0])
gc.collect()
readonly = reader.open_file(path, writable=False)
start, end = readonly.mapping_range
pointer = readonly.tensor("f64").data_ptr()
report["readOnlyInMapping"] = start <= pointer < end
print(json.dumps(report))
`;

const HOSTILE: [string, Buffer, string][] = [
  ['too-small', Buffer.from([1, 0, 0, 0]), 'SAFETENSORS_HEADER_TOO_SMALL'],
  ['huge-length', rawFile('{}', 0, 2n ** 40n), 'SAFETENSORS_HEADER_TOO_LARGE'],
  ['length-past-end', rawFile('{}', 0, 1000n), 'SAFETENSORS_INVALID_HEADER_LENGTH'],
  ['not-utf8', rawFile(Buffer.from([0x7b, 0xff, 0x7d]), 0), 'SAFETENSORS_INVALID_UTF8'],
  ['array', rawFile('[]', 0), 'SAFETENSORS_INVALID_HEADER_START'],
  ['empty-header', rawFile('', 0), 'SAFETENSORS_INVALID_JSON'],
  ['cut-json', rawFile('{"a":', 0), 'SAFETENSORS_INVALID_JSON'],
  [
    'nan',
    rawFile(`{"a":${entry('U8', [1], [0, 1]).replace('[1]', '[NaN]')}}`, 1),
    'SAFETENSORS_INVALID_JSON',
  ],
  ['lone-surrogate', rawFile(`{"\\ud800":${entry('U8', [1], [0, 1])}}`, 1), 'SAFETENSORS_INVALID_JSON'],
  [
    'duplicate',
    rawFile(`{"a":${entry('U8', [1], [0, 1])},"a":${entry('U8', [1], [1, 2])}}`, 2),
    'SAFETENSORS_DUPLICATE_TENSOR',
  ],
  ['unknown-dtype', rawFile(`{"a":${entry('F12', [1], [0, 1])}}`, 1), 'SAFETENSORS_UNKNOWN_DTYPE'],
  [
    'float-shape',
    rawFile(`{"a":${entry('U8', [1], [0, 1]).replace('[1]', '[1.0]')}}`, 1),
    'SAFETENSORS_INVALID_TENSOR_INFO',
  ],
  ['negative-shape', rawFile(`{"a":${entry('U8', [-1], [0, 1])}}`, 1), 'SAFETENSORS_INVALID_TENSOR_INFO'],
  ['bool-offset', rawFile(`{"a":${entry('U8', [1], [false, true])}}`, 1), 'SAFETENSORS_INVALID_TENSOR_INFO'],
  ['no-offsets', rawFile('{"a":{"dtype":"U8","shape":[1]}}', 1), 'SAFETENSORS_INVALID_TENSOR_INFO'],
  ['three-offsets', rawFile(`{"a":${entry('U8', [1], [0, 1, 2])}}`, 1), 'SAFETENSORS_INVALID_TENSOR_INFO'],
  ['entry-not-object', rawFile('{"a":[1,2]}', 0), 'SAFETENSORS_INVALID_TENSOR_INFO'],
  [
    'metadata-number',
    rawFile(`{"__metadata__":{"k":1},"a":${entry('U8', [1], [0, 1])}}`, 1),
    'SAFETENSORS_INVALID_METADATA',
  ],
  [
    'overlap',
    rawFile(`{"a":${entry('U8', [4], [0, 4])},"b":${entry('U8', [4], [2, 6])}}`, 6),
    'SAFETENSORS_INVALID_OFFSET',
  ],
  [
    'gap',
    rawFile(`{"a":${entry('U8', [2], [0, 2])},"b":${entry('U8', [2], [4, 6])}}`, 6),
    'SAFETENSORS_INVALID_OFFSET',
  ],
  ['backwards', rawFile(`{"a":${entry('U8', [2], [4, 2])}}`, 4), 'SAFETENSORS_INVALID_OFFSET'],
  ['size-mismatch', rawFile(`{"a":${entry('F32', [3], [0, 8])}}`, 8), 'SAFETENSORS_TENSOR_SIZE_MISMATCH'],
  [
    'overflow',
    rawFile(`{"a":${entry('U8', [2 ** 32, 2 ** 32, 2 ** 32], [0, 1])}}`, 1),
    'SAFETENSORS_OVERFLOW',
  ],
  ['huge-empty-dim', rawFile(`{"a":${entry('U8', [0, 2 ** 60], [0, 0])}}`, 0), 'SAFETENSORS_OVERFLOW'],
  ['sub-byte', rawFile(`{"a":${entry('F4', [3], [0, 2])}}`, 2), 'SAFETENSORS_MISALIGNED_SLICE'],
  ['truncated', rawFile(`{"a":${entry('F32', [2], [0, 8])}}`, 4), 'SAFETENSORS_TRUNCATED'],
  ['trailing-bytes', rawFile(`{"a":${entry('U8', [2], [0, 2])}}`, 5), 'SAFETENSORS_INCOMPLETE_BUFFER'],
];
