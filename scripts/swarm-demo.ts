/**
 * `npm start`: the swarm demo on generated data. Synthesises a Llama-style checkpoint, hashes it into
 * a manifest, then starts, as separate processes on loopback, an origin file server capped at the
 * origin rate, a scheduler, and 8 agents each capped at the host rate (so the origin alone could
 * not feed them all fast: the swarm has to matter). Every agent is asked for the model at once; the
 * demo records when each holds it, checks every copy byte for byte against the origin's files, and
 * prints per-host times next to the fluid lower bound T_lb.
 *
 *   node dist/scripts/swarm-demo.js [--hosts 8] [--size-mb 256] [--mbps 200] [--origin-mbps 200]
 *                                   [--piece-mb P (default: the manifest's for the size)] [--keep]
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { buildManifest } from '../src/manifest/build.js';
import { manifestDigest, totalPieces } from '../src/manifest/manifest.js';
import { verifyDirectory } from '../src/manifest/verify.js';
import { LocalOrigin } from '../src/origin/local.js';
import { fluidLowerBoundSeconds } from '../src/sim/bound.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { formatBytes, formatSeconds } from '../src/util/units.js';
import { mbpsToBytesPerSecond } from '../src/util/throttle.js';
import { Cluster } from './cluster.js';
import { identicalToOrigin } from './swarm-demo-check.js';

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      hosts: { type: 'string', default: '8' },
      'size-mb': { type: 'string', default: '256' },
      mbps: { type: 'string', default: '200' },
      'origin-mbps': { type: 'string' },
      'piece-mb': { type: 'string' },
      keep: { type: 'boolean', default: false },
    },
  });
  const hosts = Number(values.hosts);
  const sizeMb = Number(values['size-mb']);
  const mbps = Number(values.mbps);
  const originMbps = Number(values['origin-mbps'] ?? values.mbps);
  const pieceMb = values['piece-mb'];
  const work = await mkdtemp(join(tmpdir(), 'weightcast-swarm-demo-'));
  const modelDir = join(work, 'origin');
  let cluster: Cluster | undefined;
  try {
    console.log(`weightcast swarm demo in ${work}`);
    const model = await synthesizeModel({
      dir: modelDir,
      arch: 'llama',
      dtype: 'bf16',
      sizeBytes: sizeMb * 1024 * 1024,
      shards: 2,
      seed: 1,
    });
    const local = new LocalOrigin(modelDir);
    const pieceSize = pieceMb === undefined ? {} : { pieceSize: Math.round(Number(pieceMb) * 1024 * 1024) };
    const manifest = await buildManifest(local, pieceSize).finally(() => local.close());
    const size = model.totalBytes;
    console.log(
      `model: ${manifest.files.length} files, ${formatBytes(size)}, ${totalPieces(manifest)} pieces of ${formatBytes(manifest.pieceSize)}, ${manifestDigest(manifest).slice(0, 23)}…`,
    );
    console.log(
      `starting an origin (${originMbps} Mbit/s), a scheduler and ${hosts} agents (${mbps} Mbit/s up and down each) as separate processes…`,
    );
    const swarm = await Cluster.start({
      modelDir,
      manifest,
      workDir: work,
      hosts,
      hostMbps: mbps,
      originMbps,
    });
    cluster = swarm;
    const started = performance.now();
    await Promise.all(Array.from({ length: hosts }, (_, i) => swarm.join(i)));
    const U = mbpsToBytesPerSecond(originMbps);
    const B = mbpsToBytesPerSecond(mbps);
    const tLb = fluidLowerBoundSeconds({
      totalBytes: size,
      hosts,
      originUploadBytesPerSecond: U,
      hostUploadBytesPerSecond: B,
      hostDownloadBytesPerSecond: B,
    });
    console.log(`distributing (fluid lower bound T_lb = ${formatSeconds(tLb)})…`);
    const times = await cluster.waitComplete(
      Array.from({ length: hosts }, (_, i) => i),
      started,
      Math.max(120_000, tLb * 20_000),
    );
    const statuses = await Promise.all(Array.from({ length: hosts }, (_, i) => cluster!.status(i)));
    const schedulerView = await cluster.schedulerStatus();
    const rows: string[][] = [];
    let allGood = true;
    for (let i = 0; i < hosts; i++) {
      const dir = cluster.cacheFilesDir(i);
      const report = await verifyDirectory(dir, manifest);
      const same = await identicalToOrigin(dir, modelDir, manifest);
      allGood &&= report.ok && same;
      const status = statuses[i]!;
      rows.push([
        `agent-${i}`,
        formatSeconds((times.get(i) ?? NaN) / 1000),
        formatBytes(status.originBytes),
        formatBytes(status.peerBytes),
        report.ok && same ? 'identical' : 'MISMATCH',
      ]);
    }
    const tLast = Math.max(...times.values()) / 1000;
    const sorted = [...times.values()].sort((a, b) => a - b);
    const originReceived = statuses.reduce((sum, s) => sum + s.originBytes, 0);
    console.log('\n' + table(['host', 'complete at', 'from origin', 'from peers', 'copy vs origin'], rows));
    console.log(
      '\n' +
        table(
          ['T_last', 'p50', 'T_lb', 'efficiency', 'origin bytes / S', 'copies checked'],
          [
            [
              formatSeconds(tLast),
              formatSeconds((sorted[Math.floor((sorted.length - 1) / 2)] ?? 0) / 1000),
              formatSeconds(tLb),
              (tLb / tLast).toFixed(2),
              `${(originReceived / size).toFixed(3)} (scheduler assigned ${(schedulerView.originBytesAssigned / size).toFixed(3)})`,
              `${hosts}/${hosts} ${allGood ? 'byte-identical' : 'WITH MISMATCHES'}`,
            ],
          ],
        ),
    );
    console.log(
      '\nT_lb = max(S/U, S/B, N*S/(U + N*B)); efficiency = T_lb / T_last. Times include joining, ' +
        'registering and the first requests; every piece was SHA-256-verified by the agent before it was stored or served.',
    );
    return allGood ? 0 : 1;
  } finally {
    await cluster?.close();
    if (values.keep) console.log(`kept ${work}`);
    else await rm(work, { recursive: true, force: true });
  }
}

process.exitCode = await main();
