/**
 * Architecture invariant for src/loader/plan: everything but files.ts (the I/O shell) is pure: no
 * file or network I/O, no clock, no unseeded randomness.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const FOLDER = fileURLToPath(new URL('../../../../src/loader/plan/', import.meta.url));
const SHELL = 'files.ts';
const BANNED = [
  /\bDate\.now\s*\(/,
  /\bnew Date\s*\(\s*\)/,
  /\bperformance\.now\s*\(/,
  /\bMath\.random\s*\(/,
  /\bsetTimeout\s*\(|\bsetInterval\s*\(|\bsetImmediate\s*\(/,
  /['"]node:(fs|fs\/promises|net|http|https|dgram|child_process|worker_threads|timers)['"]/,
];

test('the plan module is pure outside its I/O shell', () => {
  const files = readdirSync(FOLDER).filter((name) => name.endsWith('.ts') && name !== SHELL);
  assert.ok(files.length >= 7, `found ${files.length} files in ${FOLDER}`);
  const violations: string[] = [];
  for (const file of files) {
    readFileSync(join(FOLDER, file), 'utf8')
      .split('\n')
      .forEach((line, index) => {
        if (/^\s*(\/\/|\*)/.test(line) || /^\s*import type\b/.test(line)) return;
        if (BANNED.some((pattern) => pattern.test(line)))
          violations.push(`${file}:${index + 1}: ${line.trim()}`);
      });
  }
  assert.deepEqual(violations, []);
});
