import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const LOAD_BENCH = fileURLToPath(new URL('../../bench/load.js', import.meta.url));
/** The model's largest tensor (its embedding, ~67 MiB) is larger than the parts' 64 MiB budget. */
const SIZE_MB = 512;
const MEMORY_MB = 128;

function missingTools(): string[] {
  return ['sha256sum', 'openssl'].filter(
    (tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0,
  );
}

const execute = promisify(execFile);

/** Runs the benchmark; its exit code and output whether it succeeds or not. */
async function run(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number; out: string; err: string }> {
  const options = { env, timeout: 240_000, maxBuffer: 16 * 1024 * 1024 };
  return execute(process.execPath, [LOAD_BENCH, ...args], options).then(
    ({ stdout, stderr }) => ({ code: 0, out: stdout, err: stderr }),
    (error: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof error.code === 'number' ? error.code : -1,
      out: error.stdout ?? '',
      err: error.stderr ?? '',
    }),
  );
}

test(
  'bench:load runs to its table when a tensor is larger than the parts budget, remaking a model cached by an older synthesiser',
  { timeout: 300_000 },
  async (t) => {
    const missing = missingTools();
    if (missing.length > 0) {
      t.skip(`needs ${missing.join(' and ')} (the benchmark's baselines)`);
      return;
    }
    const temp = await mkdtemp(join(tmpdir(), 'weightcast-load-bench-test-'));
    try {
      // What the benchmark's cache held before its marker named the synthesiser's plan: a date.
      const root = join(temp, `weightcast-bench-load-${SIZE_MB}mb`);
      await mkdir(join(root, 'model'), { recursive: true });
      await writeFile(join(root, 'complete'), '2026-11-26T10:00:00.000Z\n');
      const args = [
        '--only',
        'stream',
        '--no-cold',
        '--size-mb',
        String(SIZE_MB),
        '--memory-mb',
        String(MEMORY_MB),
      ];
      const { code, out, err } = await run(args, { ...process.env, TMPDIR: temp });
      assert.equal(code, 0, err.slice(-2000));
      assert.match(err, new RegExp(`synthesising a ${SIZE_MB} MiB llama checkpoint`));
      const whole = out.split('\n').find((line) => line.includes('whole tensors'));
      assert.ok(whole !== undefined, out);
      const largest = /(\d+) MiB budget \(the largest tensor is (\d+) MiB\)/.exec(whole);
      assert.ok(largest !== null, whole);
      assert.equal(largest[1], largest[2]);
      assert.ok(Number(largest[2]) > MEMORY_MB - 64, whole);
      // The second run measures the model the first one made.
      const again = await run(args, { ...process.env, TMPDIR: temp });
      assert.equal(again.code, 0, again.err.slice(-2000));
      assert.doesNotMatch(again.err, /synthesising/);
    } finally {
      await rm(temp, { recursive: true, force: true });
    }
  },
);
