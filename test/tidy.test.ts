/**
 * Architecture invariant, enforced: modules and folders declared pure contain no I/O, no clock and
 * no randomness, so they run the same in production, in tests and in the simulator.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Files and folders (relative to the repository) that must stay pure. Folders not built yet are skipped. */
const PURE = [
  'src/swarm/core',
  'src/sim',
  'src/seed/plan',
  'src/origin/retry.ts',
  'src/origin/response-reader.ts',
  'src/swarm/wire/peer-frames.ts',
  'src/manifest/merkle.ts',
  'src/format/inspect.ts',
  'src/format/json-keys.ts',
  'src/synth/plan.ts',
  'src/synth/architectures.ts',
  'src/synth/sizing.ts',
  'src/synth/sharding.ts',
  'src/synth/tokenizer.ts',
];

const BANNED: Array<[RegExp, string]> = [
  [/\bDate\.now\s*\(/, 'reads the clock'],
  [/\bnew Date\s*\(\s*\)/, 'reads the clock'],
  [/\bperformance\.now\s*\(/, 'reads the clock'],
  [/\bprocess\.hrtime\b/, 'reads the clock'],
  [/\bMath\.random\s*\(/, 'uses unseeded randomness'],
  [/\bsetTimeout\s*\(|\bsetInterval\s*\(|\bsetImmediate\s*\(/, 'uses timers'],
  [
    /['"]node:(fs|fs\/promises|net|http|https|dgram|child_process|worker_threads|timers|timers\/promises)['"]/,
    'does I/O',
  ],
];

function sourceFiles(path: string): string[] {
  const absolute = join(ROOT, path);
  if (!existsSync(absolute)) return [];
  if (statSync(absolute).isFile()) return [path];
  return readdirSync(absolute).flatMap((name) => sourceFiles(join(path, name)));
}

test('pure modules do no I/O, read no clock and draw no unseeded random numbers', () => {
  const files = PURE.flatMap(sourceFiles).filter((file) => file.endsWith('.ts'));
  assert.ok(files.length >= 10, `found ${files.length} pure files; the list above is out of date`);
  const violations: string[] = [];
  for (const file of files) {
    const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
    lines.forEach((line, index) => {
      // Comments and type-only imports (erased at compile time) cannot do anything at run time.
      if (/^\s*(\/\/|\*)/.test(line) || /^\s*import type\b/.test(line)) return;
      for (const [pattern, reason] of BANNED) {
        if (pattern.test(line)) violations.push(`${file}:${index + 1} ${reason}: ${line.trim()}`);
      }
    });
  }
  assert.deepEqual(violations, []);
});
