import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { memoryIo } from '../../src/cli/io.js';
import { runCli } from '../../src/cli/main.js';

async function withTempDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'weightcast-synth-cli-'));
  try {
    await body(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('synth --json prints one object describing what it wrote', async () => {
  await withTempDir(async (dir) => {
    const io = memoryIo();
    const to = join(dir, 'model');
    const args = ['synth', '--to', to, '--arch', 'qwen2-moe', '--size-mb', '2', '--seed', '4', '--json'];
    assert.equal(await runCli(args, io), 0);
    assert.equal(io.out.length, 1);
    const summary = JSON.parse(io.out[0] ?? '') as Record<string, unknown>;
    assert.equal(summary['event'], 'synthesized');
    assert.equal(summary['arch'], 'qwen2-moe');
    assert.equal(summary['seed'], 4);
    const files = summary['files'] as { path: string }[];
    assert.deepEqual(
      files.map((file) => file.path),
      (await readdir(to)).sort(),
    );
  });
});

test('synth prints a human summary', async () => {
  await withTempDir(async (dir) => {
    const io = memoryIo();
    assert.equal(await runCli(['synth', '--to', dir, '--layers', '2', '--hidden', '128'], io), 0);
    const text = io.out.join('');
    assert.match(text, /llama bf16/);
    assert.match(text, /hidden 128, layers 2/);
    assert.equal(io.err.join(''), '');
  });
});

test('bad options exit 2 with SYNTH_INVALID_OPTIONS', async () => {
  await withTempDir(async (dir) => {
    const cases = [
      ['--arch', 'gpt2'],
      ['--arch', 'llama', '--experts', '8'],
      ['--hidden', '100', '--heads', '3'],
      ['--layers', 'two'],
      ['--size-mb', '-1'],
    ];
    for (const extra of cases) {
      const io = memoryIo();
      assert.equal(await runCli(['synth', '--to', dir, ...extra], io), 2, extra.join(' '));
      assert.match(io.err.join(''), /SYNTH_INVALID_OPTIONS/);
    }
    const io = memoryIo();
    assert.equal(await runCli(['synth', '--to', dir, '--arch', 'nope', '--json'], io), 2);
    const error = (JSON.parse(io.out[0] ?? '') as { error: { code: string } }).error;
    assert.equal(error.code, 'SYNTH_INVALID_OPTIONS');
  });
});

test('a size the fixed dimensions cannot make exits 2 before anything is written', async () => {
  await withTempDir(async (dir) => {
    const io = memoryIo();
    const to = join(dir, 'model');
    assert.equal(await runCli(['synth', '--to', to, '--layers', '32', '--size-mb', '1'], io), 2);
    assert.match(
      io.err.join(''),
      /SYNTH_INVALID_OPTIONS: cannot make a llama bf16 model within 10% of 1\.00 MiB with layers 32: the nearest model with those is 4\.\d\d MiB/,
    );
    assert.deepEqual(await readdir(dir), []);
  });
});

test('a small FP8 deepseek-v3 splits over tp 2, 4 and 8', async () => {
  await withTempDir(async (dir) => {
    const args = ['synth', '--to', dir, '--arch', 'deepseek-v3', '--dtype', 'f8_e4m3', '--size-mb', '2'];
    assert.equal(await runCli(args, memoryIo()), 0);
    for (const tp of ['2', '4', '8']) {
      const io = memoryIo();
      assert.equal(await runCli(['plan', dir, '--tp', tp, '--json'], io), 0, `tp ${tp}: ${io.err.join('')}`);
    }
  });
});

test('synth into a directory holding an older model with more shards exits 2 and leaves it as it was', async () => {
  await withTempDir(async (dir) => {
    assert.equal(await runCli(['synth', '--to', dir, '--size-mb', '1', '--shards', '3'], memoryIo()), 0);
    const before = (await readdir(dir)).sort();
    const io = memoryIo();
    assert.equal(await runCli(['synth', '--to', dir, '--size-mb', '1', '--shards', '2', '--json'], io), 2);
    const error = (JSON.parse(io.out[0] ?? '') as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'USAGE');
    assert.match(error.message, /model-00003-of-00003\.safetensors/);
    assert.deepEqual((await readdir(dir)).sort(), before);
  });
});
