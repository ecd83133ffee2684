import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isWeightcastError, type ErrorCode } from '../../src/errors.js';
import { DTYPES, tensorBits, type Dtype } from '../../src/format/dtype.js';
import {
  HEADER_BYTES_MAX,
  parseSafetensorsBuffer,
  parseSafetensorsHeader,
  readHeaderLength,
  readSafetensorsHeader,
  readSafetensorsHeaderFromFile,
} from '../../src/format/safetensors.js';
import {
  SafetensorsFileWriter,
  planSafetensorsLayout,
  type TensorSpec,
} from '../../src/format/safetensors-writer.js';

const FILE = 'test.safetensors';
const scratch = await mkdtemp(join(tmpdir(), 'weightcast-safetensors-'));
after(() => rm(scratch, { recursive: true, force: true }));

/** A file made byte by byte: 8-byte length, the header text as given, then `dataBytes` zero bytes. */
function fileOf(header: string | Uint8Array, dataBytes: number, lengthOverride?: bigint): Uint8Array {
  const headerBytes = typeof header === 'string' ? Buffer.from(header, 'utf8') : header;
  const file = new Uint8Array(8 + headerBytes.length + dataBytes);
  new DataView(file.buffer).setBigUint64(0, lengthOverride ?? BigInt(headerBytes.length), true);
  file.set(headerBytes, 8);
  return file;
}

/** One tensor entry's JSON. */
function entry(dtype: string, shape: unknown, offsets: unknown): string {
  return `{"dtype":${JSON.stringify(dtype)},"shape":${JSON.stringify(shape)},"data_offsets":${JSON.stringify(offsets)}}`;
}

function rejects(file: Uint8Array, code: ErrorCode, tensor?: string): void {
  assert.throws(
    () => parseSafetensorsBuffer(file, FILE),
    (error: unknown) => {
      assert.ok(isWeightcastError(error), `expected a WeightcastError, got ${String(error)}`);
      assert.equal(error.code, code, error.message);
      assert.equal(error.details.file, FILE);
      assert.ok(error.message.includes(FILE), error.message);
      assert.equal(error.details.tensor, tensor, error.message);
      if (tensor !== undefined) assert.ok(error.message.includes(JSON.stringify(tensor)), error.message);
      return true;
    },
  );
}

async function writeWithWriter(
  path: string,
  specs: TensorSpec[],
  metadata?: Record<string, string>,
): Promise<ReturnType<typeof planSafetensorsLayout>> {
  const layout = planSafetensorsLayout(specs, metadata);
  const writer = await SafetensorsFileWriter.create(path, layout);
  const dataBytes = layout.fileSize - layout.dataStart;
  // Odd chunk sizes so that chunks straddle tensor boundaries.
  for (let written = 0; written < dataBytes; written += 7) {
    const length = Math.min(7, dataBytes - written);
    await writer.write(new Uint8Array(length).fill(written % 251));
  }
  await writer.close();
  return layout;
}

describe('accepts valid files', () => {
  test("the writer's output, for every dtype, empty tensors, scalars and metadata", async () => {
    const specs: TensorSpec[] = DTYPES.map((dtype, index) => ({
      name: `t.${index}.${dtype.toLowerCase()}`,
      dtype,
      shape: [2, 4],
    }));
    specs.push({ name: 'empty', dtype: 'BF16', shape: [3, 0, 5] });
    specs.push({ name: 'scalar', dtype: 'F32', shape: [] });
    specs.push({ name: 'empty.f4', dtype: 'F4', shape: [0] });
    const path = join(scratch, 'all-dtypes.safetensors');
    const layout = await writeWithWriter(path, specs, { format: 'pt', note: 'caf\u00e9 \u{1F600}' });

    const header = await readSafetensorsHeaderFromFile(path);
    assert.equal(header.file, path);
    assert.equal(header.fileSize, layout.fileSize);
    assert.equal(header.dataStart, layout.dataStart);
    assert.equal(header.headerLength, layout.dataStart - 8);
    assert.deepEqual(header.metadata, { format: 'pt', note: 'caf\u00e9 \u{1F600}' });
    assert.deepEqual(
      header.tensors,
      layout.tensors.map((t) => ({
        name: t.name,
        dtype: t.dtype,
        shape: t.shape,
        dataOffsets: [t.begin, t.end],
        start: layout.dataStart + t.begin,
        end: layout.dataStart + t.end,
      })),
    );
    for (const tensor of header.tensors) {
      assert.equal(BigInt(tensor.end - tensor.start) * 8n, tensorBits(tensor.dtype, tensor.shape));
    }
    assert.deepEqual(parseSafetensorsBuffer(await readFile(path), path), header);
  });

  test('a file with no tensors and no metadata', () => {
    const header = parseSafetensorsBuffer(fileOf('{}', 0), FILE);
    assert.deepEqual(header.tensors, []);
    assert.equal(header.metadata, null);
    assert.equal(header.dataStart, 10);
  });

  test('JSON whitespace padding before and after the object, as the reference allows', () => {
    const padded = `\t\n {"a":${entry('I32', [2], [0, 8])}}   \r\n  `;
    const header = parseSafetensorsBuffer(fileOf(padded, 8), FILE);
    assert.equal(header.tensors[0]?.name, 'a');
    assert.equal(header.tensors[0]?.start, 8 + Buffer.byteLength(padded));
  });

  test('tensors come back sorted by offset, whatever the header order', () => {
    const json = `{"b":${entry('U8', [4], [4, 8])},"0":${entry('U8', [4], [8, 12])},"a":${entry('U8', [2, 2], [0, 4])}}`;
    const header = parseSafetensorsBuffer(fileOf(json, 12), FILE);
    assert.deepEqual(
      header.tensors.map((t) => [t.name, t.dataOffsets]),
      [
        ['a', [0, 4]],
        ['b', [4, 8]],
        ['0', [8, 12]],
      ],
    );
  });

  test('empty tensors may share an offset; ties keep header order', () => {
    const json = `{"z":${entry('F32', [0], [0, 0])},"y":${entry('F32', [2, 0], [0, 0])},"x":${entry('F32', [1], [0, 4])}}`;
    const header = parseSafetensorsBuffer(fileOf(json, 4), FILE);
    assert.deepEqual(
      header.tensors.map((t) => t.name),
      ['z', 'y', 'x'],
    );
  });

  test('escaped names are decoded; unknown fields are ignored; metadata may be null', () => {
    const extra = '"extra":{"nested":[1,2.5,"\\ud83d\\ude00",null,true]}';
    const json = `{"__metadata__":null,"a\\"b\\\\":{"dtype":"F16",${extra},"shape":[3],"data_offsets":[0,6]}}`;
    const header = parseSafetensorsBuffer(fileOf(json, 6), FILE);
    assert.equal(header.metadata, null);
    assert.equal(header.tensors[0]?.name, 'a"b\\');
  });

  test('duplicate keys inside __metadata__ keep the last value, as serde does', () => {
    const header = parseSafetensorsBuffer(
      fileOf('{"__metadata__":{"k":"1","k":"2","__proto__":"x"}}', 0),
      FILE,
    );
    assert.equal(header.metadata?.['k'], '2');
    assert.equal(Object.getOwnPropertyDescriptor(header.metadata, '__proto__')?.value, 'x');
  });

  test('a multi-megabyte header with tens of thousands of tensors', () => {
    const count = 40_000;
    const parts: string[] = [];
    for (let i = 0; i < count; i++)
      parts.push(`"model.layers.${i}.mlp.weight":${entry('BF16', [2], [4 * i, 4 * i + 4])}`);
    const json = `{"__metadata__":{"format":"pt"},${parts.join(',')}}`;
    assert.ok(json.length > 2_000_000);
    const header = parseSafetensorsBuffer(fileOf(json, 4 * count), FILE);
    assert.equal(header.tensors.length, count);
    assert.equal(header.tensors.at(-1)?.name, `model.layers.${count - 1}.mlp.weight`);
  });
});

describe('rejects malformed files with stable codes', () => {
  const ok = (name: string, begin: number, end: number): string =>
    `"${name}":${entry('U8', [end - begin], [begin, end])}`;

  test('too short for the length prefix', () => {
    rejects(new Uint8Array(0), 'SAFETENSORS_HEADER_TOO_SMALL');
    rejects(new Uint8Array(7), 'SAFETENSORS_HEADER_TOO_SMALL');
  });

  test('absurd header lengths', () => {
    rejects(fileOf('{}', 0, 2n ** 63n), 'SAFETENSORS_HEADER_TOO_LARGE');
    rejects(fileOf('{}', 0, 2n ** 64n - 1n), 'SAFETENSORS_HEADER_TOO_LARGE');
    rejects(fileOf('{}', 0, BigInt(HEADER_BYTES_MAX) + 1n), 'SAFETENSORS_HEADER_TOO_LARGE');
    rejects(fileOf('{}', 0, BigInt(HEADER_BYTES_MAX)), 'SAFETENSORS_INVALID_HEADER_LENGTH');
    rejects(fileOf('{}', 0, 3n), 'SAFETENSORS_INVALID_HEADER_LENGTH');
    rejects(fileOf('', 0, 1n), 'SAFETENSORS_INVALID_HEADER_LENGTH');
  });

  test('a header that is not UTF-8', () => {
    rejects(fileOf(Uint8Array.of(0x7b, 0xff, 0x7d), 0), 'SAFETENSORS_INVALID_UTF8');
    // An encoded surrogate and an overlong encoding, both refused by Rust's from_utf8.
    rejects(fileOf(Uint8Array.of(0x7b, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d), 0), 'SAFETENSORS_INVALID_UTF8');
    rejects(fileOf(Uint8Array.of(0x7b, 0x22, 0xc0, 0xaf, 0x22, 0x7d), 0), 'SAFETENSORS_INVALID_UTF8');
  });

  test('a header that is not a JSON object', () => {
    rejects(fileOf('[]', 0), 'SAFETENSORS_INVALID_HEADER_START');
    rejects(fileOf('  "x"', 0), 'SAFETENSORS_INVALID_HEADER_START');
    rejects(fileOf('\u{feff}{}', 0), 'SAFETENSORS_INVALID_HEADER_START');
    rejects(fileOf('\u00a0{}', 0), 'SAFETENSORS_INVALID_HEADER_START');
  });

  test('a header that is not valid JSON', () => {
    rejects(fileOf('', 0), 'SAFETENSORS_INVALID_JSON');
    rejects(fileOf('    ', 0), 'SAFETENSORS_INVALID_JSON');
    rejects(fileOf('{', 0), 'SAFETENSORS_INVALID_JSON');
    rejects(fileOf('{"a":1,}', 0), 'SAFETENSORS_INVALID_JSON');
    rejects(fileOf('{}\u0000', 0), 'SAFETENSORS_INVALID_JSON');
    rejects(fileOf('{} {}', 0), 'SAFETENSORS_INVALID_JSON');
  });

  test('an unknown dtype', () => {
    rejects(fileOf(`{"w":${entry('F128', [1], [0, 16])}}`, 16), 'SAFETENSORS_UNKNOWN_DTYPE', 'w');
    rejects(fileOf(`{"w":${entry('f32', [1], [0, 4])}}`, 4), 'SAFETENSORS_UNKNOWN_DTYPE', 'w');
  });

  test('malformed tensor entries', () => {
    const bad = (value: string): Uint8Array => fileOf(`{"w":${value}}`, 4);
    const cases = [
      '5',
      'null',
      '["F32",[1],[0,4]]',
      '{"shape":[1],"data_offsets":[0,4]}',
      '{"dtype":"F32","data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[1]}',
      '{"dtype":7,"shape":[1],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":1,"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[-0],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}',
      '{"dtype":"F32","shape":[1],"data_offsets":[0]}',
      '{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}',
      '{"dtype":"F32","shape":[1],"data_offsets":{"begin":0,"end":4}}',
      '{"dtype":"F32","shape":[1],"data_offsets":[0,4],"dtype":"F32"}',
    ];
    for (const value of cases) rejects(bad(value), 'SAFETENSORS_INVALID_TENSOR_INFO', 'w');
  });

  test('what serde_json refuses even in ignored fields', () => {
    const withExtra = (extra: string): Uint8Array =>
      fileOf(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":${extra}}}`, 1);
    rejects(withExtra('1e400'), 'SAFETENSORS_INVALID_JSON', 'w');
    rejects(withExtra('["\\udc00"]'), 'SAFETENSORS_INVALID_JSON', 'w');
    rejects(withExtra('{"\\ud800x":1}'), 'SAFETENSORS_INVALID_JSON', 'w');
    // The top-level object and the entry are two levels; serde_json allows 127 in all.
    parseSafetensorsBuffer(withExtra('['.repeat(125) + ']'.repeat(125)), FILE);
    rejects(withExtra('['.repeat(126) + ']'.repeat(126)), 'SAFETENSORS_INVALID_JSON', 'w');
    rejects(fileOf(`{"\\ud800":${entry('U8', [1], [0, 1])}}`, 1), 'SAFETENSORS_INVALID_JSON', '\ud800');
  });

  test('a tensor name used twice, however it is spelled', () => {
    rejects(fileOf(`{${ok('a', 0, 1)},${ok('a', 1, 2)}}`, 2), 'SAFETENSORS_DUPLICATE_TENSOR', 'a');
    rejects(fileOf(`{${ok('a', 0, 1)},${ok('\\u0061', 1, 2)}}`, 2), 'SAFETENSORS_DUPLICATE_TENSOR', 'a');
    rejects(fileOf('{"__metadata__":{},"__metadata__":{}}', 0), 'SAFETENSORS_INVALID_METADATA');
  });

  test('gaps, overlaps and reversed offsets', () => {
    rejects(fileOf(`{${ok('a', 0, 4)},${ok('b', 5, 8)}}`, 8), 'SAFETENSORS_INVALID_OFFSET', 'b');
    rejects(fileOf(`{${ok('a', 1, 4)}}`, 4), 'SAFETENSORS_INVALID_OFFSET', 'a');
    rejects(fileOf(`{${ok('a', 0, 4)},${ok('b', 2, 6)}}`, 6), 'SAFETENSORS_INVALID_OFFSET', 'b');
    rejects(fileOf(`{${ok('a', 0, 4)},${ok('b', 0, 4)}}`, 8), 'SAFETENSORS_INVALID_OFFSET', 'b');
    rejects(fileOf(`{"a":${entry('U8', [0], [4, 0])}}`, 4), 'SAFETENSORS_INVALID_OFFSET', 'a');
  });

  test('offsets that disagree with dtype and shape', () => {
    rejects(fileOf(`{"a":${entry('F32', [2, 2], [0, 8])}}`, 8), 'SAFETENSORS_TENSOR_SIZE_MISMATCH', 'a');
    rejects(fileOf(`{"a":${entry('F32', [], [0, 8])}}`, 8), 'SAFETENSORS_TENSOR_SIZE_MISMATCH', 'a');
    rejects(fileOf(`{"a":${entry('F32', [0], [0, 4])}}`, 4), 'SAFETENSORS_TENSOR_SIZE_MISMATCH', 'a');
  });

  test('sub-byte tensors that do not fill whole bytes', () => {
    rejects(fileOf(`{"a":${entry('F4', [3], [0, 2])}}`, 2), 'SAFETENSORS_MISALIGNED_SLICE', 'a');
    rejects(fileOf(`{"a":${entry('F6_E2M3', [1], [0, 1])}}`, 1), 'SAFETENSORS_MISALIGNED_SLICE', 'a');
  });

  test('shapes whose size overflows', () => {
    const huge = `{"a":{"dtype":"U8","shape":[1099511627776,1099511627776],"data_offsets":[0,16]}}`;
    rejects(fileOf(huge, 16), 'SAFETENSORS_OVERFLOW', 'a');
    // The reference's own overflow cases: elements, then elements times the dtype width.
    rejects(
      fileOf(`{"a":{"dtype":"I32","shape":[2,18446744073709551614],"data_offsets":[0,16]}}`, 16),
      'SAFETENSORS_OVERFLOW',
      'a',
    );
    rejects(
      fileOf(`{"a":{"dtype":"I32","shape":[2,9223372036854775807],"data_offsets":[0,16]}}`, 16),
      'SAFETENSORS_OVERFLOW',
      'a',
    );
    // Fits in 64 bits as the reference counts, but not exactly in a JS number.
    rejects(
      fileOf(`{"a":{"dtype":"U8","shape":[9007199254740993],"data_offsets":[0,16]}}`, 16),
      'SAFETENSORS_OVERFLOW',
      'a',
    );
    rejects(
      fileOf(`{"a":{"dtype":"U8","shape":[0,9007199254740993],"data_offsets":[0,0]}}`, 0),
      'SAFETENSORS_OVERFLOW',
      'a',
    );
  });

  test('a data buffer that is truncated or has trailing bytes', () => {
    rejects(fileOf(`{${ok('a', 0, 4)},${ok('b', 4, 8)}}`, 6), 'SAFETENSORS_TRUNCATED', 'b');
    rejects(fileOf(`{${ok('a', 0, 4)}}`, 5), 'SAFETENSORS_INCOMPLETE_BUFFER');
    rejects(fileOf('{}', 1), 'SAFETENSORS_INCOMPLETE_BUFFER');
  });

  test('bad metadata', () => {
    for (const value of ['[]', '"x"', '1', '{"a":1}', '{"a":null}', '{"a":["x"]}', '{"a":{"b":"c"}}']) {
      rejects(fileOf(`{"__metadata__":${value}}`, 0), 'SAFETENSORS_INVALID_METADATA');
    }
    rejects(fileOf('{"__metadata__":{"a":"\\ud800"}}', 0), 'SAFETENSORS_INVALID_JSON');
  });
});

describe('reading', () => {
  const valid = fileOf(`{"a":${entry('F32', [2], [0, 8])}}  `, 8);
  const rangeReader = (bytes: Uint8Array, calls: Array<[number, number]>) => {
    return (offset: number, length: number): Promise<Uint8Array> => {
      calls.push([offset, length]);
      return Promise.resolve(bytes.subarray(offset, offset + length));
    };
  };

  test('readSafetensorsHeader issues exactly two reads', async () => {
    const calls: Array<[number, number]> = [];
    const header = await readSafetensorsHeader(rangeReader(valid, calls), valid.length, FILE);
    assert.deepEqual(calls, [
      [0, 8],
      [8, header.headerLength],
    ]);
    assert.deepEqual(header, parseSafetensorsBuffer(valid, FILE));
  });

  test('a read that comes back short is a truncated file', async () => {
    const calls: Array<[number, number]> = [];
    const short = valid.subarray(0, 20);
    await assert.rejects(readSafetensorsHeader(rangeReader(short, calls), valid.length, FILE), {
      code: 'SAFETENSORS_TRUNCATED',
    });
  });

  test('no read at all when the size rules the file out', async () => {
    const calls: Array<[number, number]> = [];
    await assert.rejects(readSafetensorsHeader(rangeReader(valid, calls), 4, FILE), {
      code: 'SAFETENSORS_HEADER_TOO_SMALL',
    });
    assert.deepEqual(calls, []);
  });

  test('a file too short for the length prefix is reported with its own size', async () => {
    const path = join(scratch, 'three-bytes.safetensors');
    await writeFile(path, 'abc');
    await assert.rejects(readSafetensorsHeaderFromFile(path), {
      code: 'SAFETENSORS_HEADER_TOO_SMALL',
      message: `${path}: 3 bytes, too short for the 8-byte header length`,
    });
  });

  test('an aborted signal stops before reading', async () => {
    const calls: Array<[number, number]> = [];
    const controller = new AbortController();
    controller.abort(new Error('stop'));
    await assert.rejects(
      readSafetensorsHeader(rangeReader(valid, calls), valid.length, FILE, { signal: controller.signal }),
      { code: 'ABORTED' },
    );
    assert.deepEqual(calls, []);
  });

  test('readHeaderLength and parseSafetensorsHeader agree with the whole-buffer parse', () => {
    const length = readHeaderLength(valid.subarray(0, 8), valid.length, FILE);
    const header = parseSafetensorsHeader(valid.subarray(8, 8 + length), valid.length, FILE);
    assert.deepEqual(header, parseSafetensorsBuffer(valid, FILE));
  });

  test('files: a missing file is an IO error; a corrupt one keeps its code', async () => {
    await assert.rejects(readSafetensorsHeaderFromFile(join(scratch, 'absent.safetensors')), { code: 'IO' });
    const path = join(scratch, 'trailing.safetensors');
    await writeFile(path, fileOf(`{"a":${entry('U8', [1], [0, 1])}}`, 2));
    await assert.rejects(readSafetensorsHeaderFromFile(path), { code: 'SAFETENSORS_INCOMPLETE_BUFFER' });
  });

  test('every dtype the reference knows', () => {
    const reference: Dtype[] = [
      'BOOL',
      'F4',
      'F6_E2M3',
      'F6_E3M2',
      'U8',
      'I8',
      'F8_E5M2',
      'F8_E4M3',
      'F8_E8M0',
      'F8_E4M3FNUZ',
      'F8_E5M2FNUZ',
      'I16',
      'U16',
      'F16',
      'BF16',
      'I32',
      'U32',
      'F32',
      'C64',
      'F64',
      'I64',
      'U64',
    ];
    assert.deepEqual([...DTYPES], reference);
  });
});
