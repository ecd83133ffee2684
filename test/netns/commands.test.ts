import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WEIGHTCAST } from '../../scripts/cluster.js';
import { missingTools } from '../../bench/netns/leg-runtime.js';
import {
  aria2cArgv,
  BITTORRENT_COMPLETE_LINE,
  chainHostArgv,
  chainOriginArgv,
  completionHookScript,
  listensOn,
  mktorrentArgv,
  nginxArgv,
  nginxOriginConfig,
  NGINX_INSTALL_HINT,
  opentrackerArgv,
  parseInfoHash,
  parseScrapeSeeds,
  parseSsRttsMs,
  percentEncodeHex,
  pieceLengthExponent,
  scrapeArgv,
  ssConnectionsArgv,
  userPullArgv,
  weightcastCommand,
  wrapCommand,
} from '../../bench/netns/commands.js';

test('the gate wrapper execs the command in place after one line on stdin', () => {
  assert.deepEqual(wrapCommand(['aria2c', 'x'], {}), ['aria2c', 'x']);
  const gated = wrapCommand(['echo', 'a b'], { gate: true, mergeStderr: true });
  assert.deepEqual(gated.slice(0, 2), ['sh', '-c']);
  assert.deepEqual(gated.slice(3), ['wrap', 'echo', 'a b']);
  const [command, ...args] = gated;
  const out = execFileSync(command ?? '', args, { input: 'go\n', encoding: 'utf8' });
  assert.equal(out, 'ready\na b\n');
  const merged = wrapCommand(['sh', '-c', 'echo oops >&2'], { mergeStderr: true });
  const [mergedCommand, ...mergedArgs] = merged;
  assert.equal(execFileSync(mergedCommand ?? '', mergedArgs, { encoding: 'utf8' }), 'oops\n');
});

test("the user's pull is the explicit local-agent form", () => {
  assert.deepEqual(
    userPullArgv({
      weightcast: ['bin/weightcast'],
      source: 'http://10.77.0.1:8080/model/',
      manifestPath: 'm.json',
      dir: 'out',
      agentUrl: 'http://10.77.0.2:7100',
    }),
    [
      'bin/weightcast',
      'pull',
      'http://10.77.0.1:8080/model/',
      '--manifest',
      'm.json',
      '--to',
      'out',
      '--agent',
      'http://10.77.0.2:7100',
      '--json',
    ],
  );
});

test('the weightcast command is the launcher; with node flags, node on its entry as the launcher would start it', () => {
  assert.deepEqual(weightcastCommand('bin/weightcast'), ['bin/weightcast']);
  const saved = process.env['NODE_EXTRA_CA_CERTS'];
  process.env['NODE_EXTRA_CA_CERTS'] = '/etc/ssl/extra.pem';
  try {
    const [file, ...args] = weightcastCommand(WEIGHTCAST, ['--max-old-space-size=100']);
    assert.equal(file, 'env');
    assert.deepEqual(args.slice(0, 3), [
      '-u',
      'NODE_EXTRA_CA_CERTS',
      'WEIGHTCAST_EXTRA_CA_CERTS=/etc/ssl/extra.pem',
    ]);
    assert.deepEqual(args.slice(3), [process.execPath, '--max-old-space-size=100', `${WEIGHTCAST}.js`]);
    const shown = execFileSync(
      file,
      [...args.slice(0, 3), 'sh', '-c', 'echo "$NODE_EXTRA_CA_CERTS|$WEIGHTCAST_EXTRA_CA_CERTS"'],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(shown, '|/etc/ssl/extra.pem\n');
  } finally {
    if (saved === undefined) delete process.env['NODE_EXTRA_CA_CERTS'];
    else process.env['NODE_EXTRA_CA_CERTS'] = saved;
  }
});

test('the torrent is private, announces to the origin host and has a piece length nearest ours', () => {
  assert.equal(pieceLengthExponent(512 * 1024), 19);
  assert.equal(pieceLengthExponent(1024 * 1024), 20);
  assert.equal(pieceLengthExponent(700 * 1024), 19);
  assert.equal(pieceLengthExponent(1024), 15);
  assert.equal(pieceLengthExponent(2 ** 30), 28);
  assert.deepEqual(
    mktorrentArgv({
      modelDir: '/w/origin/model',
      name: 'model',
      trackerAddress: '10.77.0.1',
      pieceBytes: 512 * 1024,
      torrentPath: '/w/bt/model.torrent',
    }),
    [
      'mktorrent',
      '--private',
      '--no-date',
      '--piece-length=19',
      '--announce=http://10.77.0.1:6969/announce',
      '--name=model',
      '--output=/w/bt/model.torrent',
      '/w/origin/model',
    ],
  );
  assert.deepEqual(opentrackerArgv({ address: '10.77.0.1', dir: '/w/bt', whitelistName: 'whitelist' }), [
    'opentracker',
    '-i',
    '10.77.0.1',
    '-p',
    '6969',
    '-P',
    '6969',
    '-d',
    '/w/bt',
    '-w',
    'whitelist',
  ]);
});

test('aria2c finds peers through the tracker only and seeds until stopped', () => {
  const leecher = aria2cArgv({
    role: 'leecher',
    torrentPath: 't.torrent',
    dir: '/w/bt/host1',
    benchPid: 42,
    completionHook: '/w/bt/hook.sh',
  });
  for (const flag of [
    '--enable-dht=false',
    '--enable-dht6=false',
    '--bt-enable-lpd=false',
    '--enable-peer-exchange=false',
    '--disable-ipv6=true',
    '--seed-ratio=0.0',
    '--stop-with-process=42',
    '--dir=/w/bt/host1',
    '--on-bt-download-complete=/w/bt/hook.sh',
  ]) {
    assert.ok(leecher.includes(flag), flag);
  }
  assert.ok(!leecher.some((flag) => flag.startsWith('--seed-time')), 'seeding has no time limit');
  assert.ok(!leecher.includes('--check-integrity=true'));
  assert.equal(leecher.at(-1), 't.torrent');
  const seeder = aria2cArgv({ role: 'seeder', torrentPath: 't.torrent', dir: '/w/origin', benchPid: 42 });
  assert.ok(seeder.includes('--check-integrity=true'));
  assert.ok(!seeder.some((flag) => flag.startsWith('--on-bt-download-complete')));
});

test('the completion hook says which download finished on stderr', () => {
  const output = execFileSync('sh', ['-c', `${completionHookScript()}`, 'hook', 'gid', '2', '/w/model/a'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  assert.equal(output, '', 'stdout is /dev/null under aria2c: the line goes to stderr');
  const both = execFileSync(
    'sh',
    ['-c', `(${completionHookScript()}) 2>&1`, 'hook', 'gid', '2', '/w/model/a'],
    {
      encoding: 'utf8',
    },
  );
  assert.equal(both, `${BITTORRENT_COMPLETE_LINE} /w/model/a\n`);
});

test('info hash, scrape and ss output are read back', () => {
  const shown = 'Mode: multi\nInfo Hash: 72946E51939FDF511E5ECABAB0C1DCB753FFFA09\nPiece Length: 512KiB\n';
  assert.equal(parseInfoHash(shown), '72946e51939fdf511e5ecabab0c1dcb753fffa09');
  assert.equal(parseInfoHash('Info Hash: 1234'), undefined);
  assert.equal(percentEncodeHex('7294ff'), '%72%94%ff');
  assert.deepEqual(scrapeArgv('10.77.0.1', '7294').slice(3), ['scrape', '%72%94', '10.77.0.1', '6969']);
  const body =
    'HTTP/1.0 200 OK\r\n\r\nd5:filesd20:xxxxxxxxxxxxxxxxxxxxd8:completei1e10:downloadedi0e10:incompletei3eeee';
  assert.equal(parseScrapeSeeds(body), 1);
  assert.equal(parseScrapeSeeds('d5:filesdee'), undefined);
  const ss = 'LISTEN 0      4096       10.77.0.1:6969      0.0.0.0:*\nLISTEN 0 5 10.77.0.1:44151 0.0.0.0:*\n';
  assert.ok(listensOn(ss, 6969));
  assert.ok(!listensOn(ss, 696));
  assert.ok(!listensOn('', 6969));
});

test('chain hosts forward before they extract, drain what tar leaves unread; the last host only extracts', () => {
  const middle = chainHostArgv({
    listenAddress: '10.77.0.2',
    dir: '/w/c/h1',
    fifo: '/w/c/h1.fifo',
    nextAddress: '10.77.0.3',
  });
  assert.deepEqual(middle.slice(3), [
    'chain-host',
    '10.77.0.2',
    '7300',
    '/w/c/h1',
    '/w/c/h1.fifo',
    '10.77.0.3',
  ]);
  assert.match(
    middle[2] ?? '',
    /TCP-LISTEN:"\$2",bind="\$1",reuseaddr STDOUT \| tee "\$4" \| \{ tar -xf - -C "\$3"; s=\$\?; cat > \/dev\/null; exit "\$s"; \}/,
  );
  assert.match(middle[2] ?? '', /STDIN TCP:"\$5":"\$2",retry=\d+,interval=[\d.]+ < "\$4" &/);
  const last = chainHostArgv({
    listenAddress: '10.77.0.4',
    dir: '/w/c/h3',
    fifo: '/w/c/h3.fifo',
    nextAddress: undefined,
  });
  assert.equal(last.at(-1), '');
  assert.deepEqual(chainOriginArgv({ modelDir: '/w/origin/model', firstAddress: '10.77.0.2' }).slice(3), [
    'chain-origin',
    '/w/origin/model',
    '10.77.0.2',
    '7300',
  ]);
});

test("the scheduler's connections' RTTs are read from ss -ti, idle ones left out when asked", () => {
  assert.deepEqual(ssConnectionsArgv(7000), ['ss', '-Htin', 'state', 'established', '( sport = :7000 )']);
  const output = [
    '0      0      10.77.0.1:7000 10.77.0.2:53422',
    '\t cubic wscale:7,7 rto:204 rtt:3.25/1.5 ato:40 mss:1448 minrtt:0.05',
    '0      0      10.77.0.1:7000 10.77.0.3:53424',
    '\t cubic wscale:7,7 rto:204 rtt:41/12.5 ato:40 mss:1448',
  ].join('\n');
  assert.deepEqual(parseSsRttsMs(output), [3.25, 41]);
  assert.deepEqual(parseSsRttsMs(''), []);
  // Only connections that sent within the window count: an idle one's RTT is from its last exchange.
  const withLastSend = [
    '0      0      10.77.0.1:7000 10.77.0.2:53422',
    '\t cubic rtt:0.1/0.05 mss:1448 lastsnd:9000 lastrcv:9000 lastack:9000',
    '0      0      10.77.0.1:7000 10.77.0.3:53424',
    '\t cubic rtt:18.5/4 mss:1448 lastsnd:120 lastrcv:80 lastack:80',
  ].join('\n');
  assert.deepEqual(parseSsRttsMs(withLastSend, 500), [18.5]);
  assert.deepEqual(parseSsRttsMs(withLastSend), [0.1, 18.5]);
});

test("the origin's nginx config: foreground, one process, the model's root; paths that need quoting refused", () => {
  const config = nginxOriginConfig({ address: '10.77.0.1', port: 8080, root: '/w/origin', dir: '/w/nginx' });
  for (const line of ['daemon off;', 'master_process off;', 'sendfile on;', 'access_log off;'])
    assert.ok(config.includes(line), line);
  assert.match(config, /listen 10\.77\.0\.1:8080; root \/w\/origin;/);
  assert.match(config, /pid \/w\/nginx\/nginx\.pid;/);
  assert.throws(
    () => nginxOriginConfig({ address: 'a', port: 1, root: '/w/a b', dir: '/w' }),
    /needs quoting/,
  );
  assert.throws(() => nginxOriginConfig({ address: 'a', port: 1, root: '/w', dir: '/w;x' }), /needs quoting/);
});

test('nginx started with that config serves byte ranges of the model and stops on SIGTERM', async (t) => {
  if (missingTools(['nginx']).length > 0) {
    t.skip(`nginx is not installed (${NGINX_INSTALL_HINT})`);
    return;
  }
  const work = await mkdtemp(join(tmpdir(), 'wc-nginx-'));
  try {
    const root = join(work, 'origin');
    const dir = join(work, 'nginx');
    await mkdir(join(root, 'model'), { recursive: true });
    await mkdir(join(dir, 'temp'), { recursive: true });
    const bytes = Buffer.from(Array.from({ length: 4096 }, (_, i) => i % 251));
    await writeFile(join(root, 'model', 'a.safetensors'), bytes);
    const probe = createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const port = (probe.address() as { port: number }).port;
    probe.close();
    const configPath = join(dir, 'nginx.conf');
    await writeFile(configPath, nginxOriginConfig({ address: '127.0.0.1', port, root, dir }));
    const [command, ...args] = nginxArgv(configPath, dir);
    const child = spawn(command ?? '', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = once(child, 'exit');
    try {
      const url = `http://127.0.0.1:${port}/model/a.safetensors`;
      let response: Response | undefined;
      for (let attempt = 0; attempt < 100 && response === undefined; attempt++) {
        response = await fetch(url, { headers: { range: 'bytes=100-199' } }).catch(async () => {
          await new Promise((resolve) => setTimeout(resolve, 50));
          return undefined;
        });
      }
      assert.ok(response !== undefined, `nginx did not answer: ${stderr}`);
      assert.equal(response.status, 206);
      assert.equal(response.headers.get('content-range'), 'bytes 100-199/4096');
      assert.deepEqual(Buffer.from(await response.arrayBuffer()), bytes.subarray(100, 200));
      const head = await fetch(url, { method: 'HEAD' });
      assert.equal(head.headers.get('content-length'), '4096');
    } finally {
      child.kill('SIGTERM');
      const [code, signal] = (await exited) as [number | null, NodeJS.Signals | null];
      assert.ok(code === 0 || signal === 'SIGTERM', `nginx ended with ${code ?? signal}: ${stderr}`);
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
});
