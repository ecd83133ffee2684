/**
 * A seed tier on loopback for the system tests: a scheduler with a catalog and seed agents, each a
 * process started and stopped by PID, plus the checks every test makes (every holder the catalog
 * names holds a verified copy, no copy the catalog does not name, whole files equal the origin's).
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CLI, startProcess, stopProcess, type Proc } from '../../../scripts/cluster.js';
import type { Manifest } from '../../../src/manifest/manifest.js';
import { tierFileHashes } from '../../../src/seed/apply/hashes.js';
import { CatalogClient } from '../../../src/seed/catalog/client.js';
import { SeedNodeClient } from '../../../src/seed/node/client.js';
import type { ModelSnapshot } from '../../../src/seed/wire.js';

export interface RunResult {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI as a child process (bounded in time); never rejects. */
export function runCli(args: readonly string[], timeoutMs = 30_000): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const failure = error as (Error & { code?: unknown; signal?: NodeJS.Signals | null }) | null;
        resolve({
          code: failure === null ? 0 : typeof failure.code === 'number' ? failure.code : null,
          signal: failure?.signal ?? null,
          stdout: String(stdout),
          stderr: String(stderr),
        });
      },
    );
  });
}

export class Tier {
  scheduler!: Proc;
  readonly nodes = new Map<string, Proc>();
  readonly catalog: CatalogClient;

  private constructor(
    readonly workDir: string,
    schedulerUrl: string,
    scheduler: Proc,
  ) {
    this.scheduler = scheduler;
    this.catalog = new CatalogClient(schedulerUrl);
  }

  static async start(workDir: string): Promise<Tier> {
    const scheduler = await startProcess(
      [CLI, 'scheduler', '--port', '0', '--catalog', join(workDir, 'catalog')],
      /listening on (\S+)/,
      'scheduler',
    );
    return new Tier(workDir, scheduler.url, scheduler);
  }

  get url(): string {
    return this.scheduler.url;
  }

  async startNode(name: string, extra: readonly string[] = []): Promise<Proc> {
    const proc = await startProcess(
      [
        CLI,
        'agent',
        '--role',
        'seed',
        '--scheduler',
        this.url,
        '--cache',
        join(this.workDir, name),
        '--port',
        '0',
        '--name',
        name,
        ...extra,
      ],
      /listening on (\S+)/,
      name,
    );
    this.nodes.set(name, proc);
    return proc;
  }

  async stopNode(name: string): Promise<void> {
    await stopProcess(this.nodes.get(name));
    this.nodes.delete(name);
  }

  async close(): Promise<void> {
    for (const name of [...this.nodes.keys()]) await this.stopNode(name);
    await stopProcess(this.scheduler);
  }

  async snapshot(hex: string): Promise<ModelSnapshot> {
    return this.catalog.requireSnapshot(hex);
  }

  /**
   * Nothing lost and nothing left over: every holder the catalog names holds its piece (and the bytes
   * verify), and no node holds a piece the catalog does not give it.
   */
  async assertConsistent(hex: string): Promise<ModelSnapshot> {
    const snapshot = await this.snapshot(hex);
    for (const node of snapshot.nodes) {
      if (!this.nodes.has(node.name)) continue;
      const client = new SeedNodeClient(node.name, node.url);
      const held = new Set(await client.held(hex).catch(() => [] as number[]));
      const named = new Set(
        snapshot.pieces.filter((piece) => piece.holders.includes(node.name)).map((piece) => piece.index),
      );
      for (const piece of named) {
        assert.ok(held.has(piece), `${node.name} is named for piece ${piece} but does not hold it`);
      }
      for (const piece of held) {
        assert.ok(named.has(piece), `${node.name} holds piece ${piece} the catalog does not give it`);
      }
    }
    return snapshot;
  }

  /** The model read back through the tier equals the origin's files, file by file. */
  async assertFilesEqual(hex: string, manifest: Manifest, originDir: string): Promise<void> {
    const hashes = await tierFileHashes(this.url, hex, manifest);
    for (const file of hashes) {
      const expected = createHash('sha256')
        .update(await readFile(join(originDir, file.path)))
        .digest('hex');
      assert.equal(file.badPieces, 0, `${file.path} has pieces that fail verification`);
      assert.equal(file.sha256, expected, `${file.path} differs from the origin`);
    }
  }
}
