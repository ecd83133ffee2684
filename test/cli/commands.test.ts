import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { runCli } from '../../src/cli/main.js';
import { memoryIo } from '../../src/cli/io.js';
import { startFileServer } from '../../src/origin/file-server.js';
import { sameFiles, tempDir, writeSmallModel } from '../helpers/fixtures.js';
import { manifestDigest } from '../../src/manifest/manifest.js';
import { fakeManifest, registerBareHost } from '../helpers/swarm.js';
import { FrameReader, openChannel } from '../../src/swarm/wire/sync-channel.js';

function jsonLines(out: string[]): Array<Record<string, unknown>> {
  return out
    .join('')
    .trim()
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

test('manifest -> pull --manifest -> verify, through the CLI, with JSON output', async () => {
  const dir = await tempDir('cli');
  const model = join(dir.path, 'model');
  const dest = join(dir.path, 'dest');
  const manifestPath = join(dir.path, 'manifest.json');
  const server = await startFileServer({ root: model });
  try {
    await writeSmallModel(model);
    const made = memoryIo();
    assert.equal(
      await runCli(['manifest', model, '--piece-size', '64KiB', '--out', manifestPath, '--json'], made),
      0,
    );
    const summary = jsonLines(made.out).find((e) => e['event'] === 'manifest');
    assert.ok(summary);
    const digest = summary['digest'] as string;
    // The manifest file is its canonical encoding, so its own SHA-256 is the model's name.
    assert.equal(
      digest,
      'sha256:' +
        createHash('sha256')
          .update(await readFile(manifestPath))
          .digest('hex'),
    );

    const pulled = memoryIo();
    const code = await runCli(
      ['pull', server.url, '--to', dest, '--manifest', manifestPath, '--digest', digest, '--json'],
      pulled,
    );
    assert.equal(code, 0, pulled.err.join(''));
    const done = jsonLines(pulled.out).find((e) => e['event'] === 'done');
    assert.equal(done?.['verified'], true);
    assert.equal(done?.['digest'], digest);
    assert.ok(await sameFiles(model, dest, ['config.json', 'model-00001-of-00002.safetensors']));

    const checked = memoryIo();
    assert.equal(await runCli(['verify', dest, '--manifest', manifestPath], checked), 0);
    assert.match(checked.out.join(''), /verified: all 5 files match/);

    await writeFile(join(dest, 'config.json'), 'tampered');
    const failed = memoryIo();
    assert.equal(await runCli(['verify', dest, '--manifest', manifestPath], failed), 1);
    assert.match(failed.out.join(''), /size-mismatch +config\.json/);

    // One flipped byte: one bad piece, named in the singular.
    const shard = join(dest, 'model-00001-of-00002.safetensors');
    const bytes = await readFile(shard);
    bytes[100] = (bytes[100] ?? 0) ^ 0xff;
    await writeFile(shard, bytes);
    const flipped = memoryIo();
    assert.equal(await runCli(['verify', dest, '--manifest', manifestPath], flipped), 1);
    assert.match(flipped.out.join(''), /corrupt +model-00001-of-00002\.safetensors +1 bad piece: 0\n/);
  } finally {
    await server.close();
    await dir.cleanup();
  }
});

test('bad input gets a typed error and exit code 2', async () => {
  const dir = await tempDir('cli-bad');
  try {
    const hostile = join(dir.path, 'hostile.json');
    await writeFile(
      hostile,
      JSON.stringify({
        format: 'weightcast-manifest',
        version: 1,
        pieceSize: 65536,
        files: [
          { path: '../../etc/passwd', size: 0, merkleRoot: createHash('sha256').digest('hex'), pieces: [] },
        ],
      }),
    );
    const io = memoryIo();
    assert.equal(
      await runCli(['pull', dir.path, '--to', join(dir.path, 'out'), '--manifest', hostile], io),
      2,
    );
    assert.match(io.err.join(''), /MANIFEST_UNSAFE_PATH/);

    const wrongDigest = memoryIo();
    await writeSmallModel(join(dir.path, 'm'));
    const manifestPath = join(dir.path, 'm.json');
    assert.equal(
      await runCli(
        ['manifest', join(dir.path, 'm'), '--piece-size', '64KiB', '--out', manifestPath],
        memoryIo(),
      ),
      0,
    );
    assert.equal(
      await runCli(
        [
          'pull',
          join(dir.path, 'm'),
          '--to',
          join(dir.path, 'o'),
          '--manifest',
          manifestPath,
          '--digest',
          'sha256:' + '0'.repeat(64),
        ],
        wrongDigest,
      ),
      2,
    );
    assert.match(wrongDigest.err.join(''), /MANIFEST_DIGEST_MISMATCH/);

    // A digest with no manifest to check it against was ignored (exit 0); now it is a usage error.
    const loneDigest = memoryIo();
    assert.equal(
      await runCli(
        ['pull', join(dir.path, 'm'), '--to', join(dir.path, 'o1'), '--digest', 'sha256:' + '0'.repeat(64)],
        loneDigest,
      ),
      2,
    );
    assert.match(loneDigest.err.join(''), /USAGE: --digest checks the manifest given with --manifest/);

    const usage = memoryIo();
    assert.equal(await runCli(['manifest', dir.path, '--piece-size', 'lots'], usage), 2);
    assert.match(usage.err.join(''), /USAGE: --piece-size/);

    const memory = memoryIo();
    assert.equal(
      await runCli(
        [
          'pull',
          join(dir.path, 'm'),
          '--to',
          join(dir.path, 'o2'),
          '--memory-mb',
          '1',
          '--piece-size',
          '16MiB',
        ],
        memory,
      ),
      2,
    );
    assert.match(memory.err.join(''), /raise --memory-mb/);

    const missing = memoryIo();
    assert.notEqual(await runCli(['pull', join(dir.path, 'nope'), '--to', join(dir.path, 'o3')], missing), 0);
    assert.match(missing.err.join(''), /ORIGIN_NOT_FOUND/);

    const onFile = memoryIo();
    await writeFile(join(dir.path, 'a-file'), 'x');
    assert.equal(await runCli(['pull', join(dir.path, 'm'), '--to', join(dir.path, 'a-file')], onFile), 2);
    assert.match(onFile.err.join(''), /weightcast: USAGE: --to .*a-file is a file, not a directory/);

    assert.equal(await runCli(['frobnicate'], memoryIo()), 2);
  } finally {
    await dir.cleanup();
  }
});

test('a service URL that is not http(s) is a usage error before anything starts', async () => {
  const dir = await tempDir('cli-url');
  try {
    const cache = join(dir.path, 'cache');
    const cases: Array<{ argv: string[]; flag: string }> = [
      { argv: ['agent', '--scheduler', 'nothere', '--cache', cache, '--port', '0'], flag: '--scheduler' },
      {
        argv: ['agent', '--scheduler', 'http://127.0.0.1:9', '--cache', cache, '--advertise', 'peer:7001'],
        flag: '--advertise',
      },
      {
        argv: ['distribute', 'sha256:' + 'a'.repeat(64), '--scheduler', 'ftp://x/', '--mode', 'balanced'],
        flag: '--scheduler',
      },
    ];
    for (const { argv, flag } of cases) {
      const io = memoryIo();
      assert.equal(await runCli(argv, io), 2, argv.join(' '));
      assert.match(io.err.join(''), new RegExp(`USAGE: ${flag} must be an http\\(s\\) URL`), argv.join(' '));
    }
    // The agent never started: it wrote nothing into its cache.
    await assert.rejects(readFile(join(cache, 'agent.json')), { code: 'ENOENT' });

    await writeSmallModel(join(dir.path, 'm'));
    const manifestPath = join(dir.path, 'm.json');
    assert.equal(await runCli(['manifest', join(dir.path, 'm'), '--out', manifestPath], memoryIo()), 0);
    for (const flag of ['--scheduler', '--agent']) {
      const io = memoryIo();
      const argv = ['pull', join(dir.path, 'm'), '--to', join(dir.path, 'o'), '--manifest', manifestPath];
      assert.equal(await runCli([...argv, flag, '10.0.0.1:7000'], io), 2, flag);
      assert.match(io.err.join(''), new RegExp(`USAGE: ${flag} must be an http\\(s\\) URL`));
    }
  } finally {
    await dir.cleanup();
  }
});

test('scheduler --per-piece with --ring-chain or --ring-push is a usage error', async () => {
  for (const other of ['--ring-chain', '--ring-push']) {
    // A scheduler that wrongly started would serve until its signal: stop it so the test fails, not hangs.
    const bad = memoryIo(AbortSignal.timeout(5000));
    assert.equal(await runCli(['scheduler', '--port', '0', '--per-piece', other], bad), 2);
    assert.match(bad.err.join(''), /--per-piece plans without rings or chains/);
  }
});

test('scheduler --downloads sets how many pieces a host is given at once; 0 is a usage error', async () => {
  // A scheduler that wrongly started would serve until its signal: stop it so the test fails, not hangs.
  const bad = memoryIo(AbortSignal.timeout(5000));
  assert.equal(await runCli(['scheduler', '--port', '0', '--downloads', '0'], bad), 2);
  assert.match(bad.err.join(''), /--downloads/);

  const manifest = fakeManifest(8, 'p');
  const hex = manifestDigest(manifest).slice('sha256:'.length);
  for (const downloads of [2, 3]) {
    const stop = new AbortController();
    const io = memoryIo(stop.signal);
    const argv = ['scheduler', '--port', '0', '--downloads', String(downloads), '--uploads', '1'];
    const running = runCli([...argv, '--origin-readers', '8', '--ring-parents', '0', '--json'], io);
    try {
      let url: string | undefined;
      for (let i = 0; i < 100 && url === undefined; i++) {
        const line = jsonLines(io.out).find((event) => event['event'] === 'listening');
        url = typeof line?.['url'] === 'string' ? line['url'] : undefined;
        if (url === undefined) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.ok(url !== undefined, 'the scheduler printed no URL');
      const base = `${url}/v1/swarms/${hex}`;
      const registered = (await registerBareHost(base, manifest, { name: 'a' })) as { host: number };
      const { socket, head } = await openChannel(
        `${base}/hosts/${registered.host}/channel`,
        AbortSignal.timeout(10_000),
      );
      const reader = new FrameReader();
      const frames: unknown[] = reader.push(head);
      socket.on('data', (chunk: Buffer) => frames.push(...reader.push(chunk)));
      for (let i = 0; i < 100 && frames.length === 0; i++)
        await new Promise((resolve) => setTimeout(resolve, 20));
      socket.destroy();
      const first = frames[0] as { assignments: unknown[] } | undefined;
      assert.equal(first?.assignments.length, downloads, `--downloads ${downloads}`);
    } finally {
      stop.abort();
      assert.equal(await running, 0);
    }
  }
});

test('--hedge-tail: the scheduler and the simulator share its default and its checks', async () => {
  for (const command of ['scheduler', 'sim']) {
    for (const bad of ['x', '-1', '1.5']) {
      const io = memoryIo(AbortSignal.timeout(5000));
      assert.equal(await runCli([command, '--hedge-tail', bad], io), 2, `${command} --hedge-tail ${bad}`);
      assert.match(io.err.join(''), /USAGE: --hedge-tail must be 0 \(never\) or an integer/);
    }
  }
  const hedged = async (extra: string[]): Promise<unknown> => {
    const io = memoryIo();
    const argv = ['sim', '--hosts', '4', '--size-gb', '0.004', '--piece-mb', '1', '--json', ...extra];
    assert.equal(await runCli(argv, io), 0);
    const options = jsonLines(io.out)[0]?.['options'] as Record<string, unknown> | undefined;
    return options?.['hedgeTailPieces'];
  };
  assert.equal(await hedged([]), 10);
  assert.equal(await hedged(['--hedge-tail', '0']), 0);
});
