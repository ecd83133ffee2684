import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { buildManifest } from '../../src/manifest/build.js';
import { writeManifest } from '../../src/manifest/manifest.js';
import { startFileServer } from '../../src/origin/file-server.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { parseJournal } from '../../src/piece/journal.js';
import { sameFiles, tempDir, writeSmallModel } from '../helpers/fixtures.js';

const PIECE = 64 * 1024;
const BIN = fileURLToPath(new URL('../../../bin/weightcast.js', import.meta.url));

function runPull(url: string, dest: string, manifestPath: string): ReturnType<typeof spawn> {
  return spawn(
    process.execPath,
    [BIN, 'pull', url, '--to', dest, '--manifest', manifestPath, '--concurrency', '1', '--json'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
}

function exitOf(child: ReturnType<typeof spawn>): Promise<number | null> {
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

test('a pull killed with SIGKILL resumes without fetching verified pieces again', async () => {
  const dir = await tempDir('resume');
  const root = join(dir.path, 'origin');
  const dest = join(dir.path, 'dest');
  await writeSmallModel(root);
  const local = new LocalOrigin(root);
  const manifest = await buildManifest(local, { pieceSize: PIECE, threads: 1 });
  await local.close();
  const manifestPath = join(dir.path, 'manifest.json');
  await writeManifest(manifestPath, manifest);
  const fileIndex = new Map(manifest.files.map((f, i) => [f.path, i]));

  let phase: 1 | 2 = 1;
  const secondRunPieces = new Set<string>();
  const server = await startFileServer({
    root,
    faults: (request) => {
      if (request.method !== 'GET' || request.range === undefined) return undefined;
      if (phase === 2)
        secondRunPieces.add(`${fileIndex.get(request.path)}:${Math.floor(request.range.start / PIECE)}`);
      // Slow the first run down so it can be killed part-way.
      return phase === 1 ? { kind: 'stall', afterBytes: 0, ms: 120 } : undefined;
    },
  });
  try {
    const first = runPull(server.url, dest, manifestPath);
    const firstExit = exitOf(first);
    const journalPath = join(dest, '.weightcast', 'journal');
    let journaled = 0;
    for (let attempt = 0; attempt < 400 && journaled < 4; attempt++) {
      await sleep(25);
      journaled = existsSync(journalPath) ? parseJournal(await readFile(journalPath, 'utf8')).length : 0;
    }
    assert.ok(journaled >= 4, `the first run journaled ${journaled} pieces before the kill`);
    first.kill('SIGKILL');
    assert.equal(await firstExit, null, 'killed by the signal');
    const verifiedBeforeKill = parseJournal(await readFile(journalPath, 'utf8'));
    const total = manifest.files.reduce((sum, f) => sum + f.pieces.length, 0);
    assert.ok(verifiedBeforeKill.length < total, 'the kill happened mid-pull');

    phase = 2;
    const second = runPull(server.url, dest, manifestPath);
    let output = '';
    second.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    assert.equal(await exitOf(second), 0, output);
    const done = output
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .find((e) => e['event'] === 'done');
    assert.ok(done, output);
    assert.ok((done['piecesReused'] as number) >= verifiedBeforeKill.length);
    for (const record of verifiedBeforeKill) {
      assert.equal(
        secondRunPieces.has(`${record.file}:${record.piece}`),
        false,
        `piece ${record.file}:${record.piece} fetched again`,
      );
    }
    assert.ok(
      await sameFiles(
        root,
        dest,
        manifest.files.map((f) => f.path),
      ),
    );
  } finally {
    await server.close();
    await dir.cleanup();
  }
});
