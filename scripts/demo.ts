/**
 * `npm start`: the single-host demo on generated data. Synthesises a ~1 GB Llama-style checkpoint,
 * builds its manifest, serves it from a local HTTP origin started in this process, pulls it with
 * every piece verified into a temporary directory, checks the copy independently, and prints a
 * summary. Everything runs on loopback and is removed afterwards (pass --keep to keep it).
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildManifest } from '../src/manifest/build.js';
import { manifestDigest, totalPieces, writeManifest } from '../src/manifest/manifest.js';
import { verifyDirectory } from '../src/manifest/verify.js';
import { startFileServer } from '../src/origin/file-server.js';
import { HttpOrigin } from '../src/origin/http.js';
import { LocalOrigin } from '../src/origin/local.js';
import { pull } from '../src/pull/pull.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { formatBytes, formatRate, formatSeconds } from '../src/util/units.js';
import { peakRssBytes } from '../src/util/peak-rss.js';

const SIZE_BYTES = 1024 * 1024 * 1024;

interface Row {
  step: string;
  bytes: number;
  seconds: number;
  note: string;
}

async function timed<T>(
  rows: Row[],
  step: string,
  bytes: (value: T) => number,
  note: (value: T) => string,
  run: () => Promise<T>,
): Promise<T> {
  process.stdout.write(`${step} ... `);
  const started = performance.now();
  const value = await run();
  const seconds = (performance.now() - started) / 1000;
  const row = { step, bytes: bytes(value), seconds, note: note(value) };
  rows.push(row);
  process.stdout.write(`${formatSeconds(seconds)}, ${formatRate(row.bytes, seconds)}  ${row.note}\n`);
  return value;
}

function printTable(rows: readonly Row[]): void {
  const header = ['step', 'bytes', 'time', 'throughput', 'result'];
  const cells = rows.map((r) => [
    r.step,
    formatBytes(r.bytes),
    formatSeconds(r.seconds),
    formatRate(r.bytes, r.seconds),
    r.note,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? '').length)));
  const line = (values: string[]): string =>
    values
      .map((v, i) => v.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  console.log('\n' + line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const c of cells) console.log(line(c));
}

async function main(): Promise<number> {
  const keep = process.argv.includes('--keep');
  const work = await mkdtemp(join(tmpdir(), 'weightcast-demo-'));
  const modelDir = join(work, 'origin');
  const destDir = join(work, 'pulled');
  const rows: Row[] = [];
  const server = await startFileServer({ root: modelDir });
  try {
    console.log(`weightcast demo in ${work}\n`);
    const model = await timed(
      rows,
      'synthesise a Llama-style checkpoint',
      (m) => m.totalBytes,
      (m) => `${m.files.length} files, ${(m.parameterCount / 1e6).toFixed(0)}M parameters`,
      () =>
        synthesizeModel({
          dir: modelDir,
          arch: 'llama',
          dtype: 'bf16',
          sizeBytes: SIZE_BYTES,
          shards: 4,
          seed: 1,
        }),
    );
    const local = new LocalOrigin(modelDir);
    const manifest = await timed(
      rows,
      'hash it into a manifest',
      () => model.totalBytes,
      (m) => `${totalPieces(m)} pieces, ${manifestDigest(m).slice(0, 23)}…`,
      () => buildManifest(local, {}).finally(() => local.close()),
    );
    await writeManifest(join(work, 'manifest.json'), manifest);
    const origin = new HttpOrigin(server.url, {
      files: manifest.files.map((f) => ({ path: f.path, size: f.size })),
    });
    const result = await timed(
      rows,
      `pull from ${server.url} (verified)`,
      (r) => r.bytesFetched,
      (r) => `${r.piecesFetched} pieces verified, ${r.piecesRejected} rejected`,
      () => pull(origin, destDir, { manifest }).finally(() => origin.close()),
    );
    const report = await timed(
      rows,
      'check the copy independently',
      (r) => r.bytesChecked,
      (r) => (r.ok ? 'all pieces match' : 'MISMATCH'),
      () => verifyDirectory(destDir, manifest),
    );
    printTable(rows);
    const ok = report.ok && result.manifestDigest === manifestDigest(manifest);
    console.log(
      `\nmodel ${result.manifestDigest}\n` +
        `${ok ? 'verified' : 'NOT verified'}: ${manifest.files.length} files, ${formatBytes(result.bytesTotal)}; ` +
        `origin served ${formatBytes(server.stats.bytesSent)} in ${server.stats.requests} requests; ` +
        `peak RSS ${formatBytes(peakRssBytes())}`,
    );
    return ok ? 0 : 1;
  } finally {
    await server.close();
    if (keep) console.log(`kept ${work}`);
    else await rm(work, { recursive: true, force: true });
  }
}

process.exitCode = await main();
