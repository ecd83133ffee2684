/**
 * TLS end to end with a CA and certificates made by the `openssl` CLI: a scheduler and an agent
 * over HTTPS with cluster tokens, and `weightcast pull --scheduler https://...` reading the model
 * from that agent; a client that trusts another CA stops with TLS_UNTRUSTED naming --tls-ca; a
 * service that verifies its callers refuses a client without a certificate from its CA.
 */

import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ServiceAccess } from '../../src/auth/transport.js';
import { memoryIo } from '../../src/cli/io.js';
import { runCli } from '../../src/cli/main.js';
import { isWeightcastError } from '../../src/errors.js';
import { buildManifest } from '../../src/manifest/build.js';
import { manifestDigest, writeManifest, type Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { startFileServer } from '../../src/origin/file-server.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { PeerWireClient } from '../../src/swarm/agent/peer-wire-client.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { PAIR_FAILURES_BAN } from '../../src/swarm/core/swarm-core.js';
import { swarmPull } from '../../src/swarm/swarm-pull.js';
import { callJson } from '../../src/swarm/wire/http-json.js';
import { sameFiles, tempDir, writeSmallModel } from '../helpers/fixtures.js';
import { makeTestCa, type TestCa, type TestCertificate } from '../helpers/tls.js';
import { CLI, WEIGHTCAST, startProcess, stopProcess } from '../../scripts/cluster.js';

const CLUSTER = randomBytes(24).toString('hex');
const credentials = { clusterToken: CLUSTER };

function opensslProblem(): string | undefined {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore', timeout: 10_000 });
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

const problem = opensslProblem();

/** Runs `file args...` to its end (30 s at most) with `env`; its exit code and output. */
function runCommand(
  file: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { env, timeout: 30_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

describe(
  'TLS',
  { timeout: 90_000, skip: problem === undefined ? false : `needs the openssl CLI: ${problem}` },
  () => {
    let work: { path: string; cleanup: () => Promise<void> };
    let modelDir: string;
    let manifest: Manifest;
    let manifestFile: string;
    let hex: string;
    let ca: TestCa;
    let otherCa: TestCa;
    let serverCert: TestCertificate;
    let clientCert: TestCertificate;
    let scheduler: SchedulerServer;
    let seeder: Agent;

    before(async () => {
      work = await tempDir('auth-tls');
      [ca, otherCa] = await Promise.all([makeTestCa(work.path, 'cluster'), makeTestCa(work.path, 'other')]);
      [serverCert, clientCert] = await Promise.all([ca.issue('server'), ca.issue('client')]);
      modelDir = join(work.path, 'model');
      await writeSmallModel(modelDir);
      const origin = new LocalOrigin(modelDir);
      manifest = await buildManifest(origin, { pieceSize: 64 * 1024 }).finally(() => origin.close());
      hex = manifestDigest(manifest).slice('sha256:'.length);
      manifestFile = join(work.path, 'manifest.json');
      await writeManifest(manifestFile, manifest);
      const access: ServiceAccess = { token: CLUSTER, tls: { ca: ca.ca } };
      scheduler = await startScheduler({ credentials, tls: { cert: serverCert.cert, key: serverCert.key } });
      seeder = await Agent.start({
        schedulerUrl: scheduler.url,
        cacheDir: join(work.path, 'seeder'),
        credentials,
        access,
        tls: { cert: serverCert.cert, key: serverCert.key },
      });
      await seeder.join({ source: modelDir, manifest });
      await seeder.whenComplete(hex);
    });

    after(async () => {
      await seeder?.close();
      await scheduler?.close();
      await work?.cleanup();
    });

    it('a scheduler, an agent and pull --scheduler over HTTPS with the test CA and a token', async () => {
      assert.match(scheduler.url, /^https:\/\//);
      assert.match(seeder.url, /^https:\/\//);
      const tokenFile = join(work.path, 'cluster-token');
      await writeFile(tokenFile, `${CLUSTER}\n`, { mode: 0o600 });
      const dest = join(work.path, 'pulled');
      const io = memoryIo(AbortSignal.timeout(60_000));
      const code = await runCli(
        [
          'pull',
          modelDir,
          '--to',
          dest,
          '--manifest',
          manifestFile,
          '--scheduler',
          scheduler.url,
          '--cluster-token-file',
          tokenFile,
          '--tls-ca',
          ca.caFile,
          '--tls-cert',
          serverCert.certFile,
          '--tls-key',
          serverCert.keyFile,
          '--json',
        ],
        io,
      );
      assert.equal(code, 0, io.err.join(''));
      const done = JSON.parse(io.out.at(-1) ?? '{}') as { verified?: boolean; peerBytes?: number };
      assert.equal(done.verified, true);
      assert.ok((done.peerBytes ?? 0) > 0, `peer bytes ${done.peerBytes}`);
      assert.ok(
        await sameFiles(
          dest,
          modelDir,
          manifest.files.map((file) => file.path),
        ),
      );
    });

    it('the peer wire runs over TLS, with the HELLO credential', async () => {
      const map = new PieceMap(manifest);
      const where = map.locate(1);
      const file = manifest.files[where.fileIndex];
      assert.ok(file !== undefined);
      const expected = (await readFile(join(modelDir, file.path))).subarray(
        where.offset,
        where.offset + where.length,
      );
      const read = async (tls: { ca: string }, credential: string): Promise<Buffer> => {
        const client = new PeerWireClient({
          url: seeder.url,
          model: hex,
          idleTimeoutMs: 5000,
          credential: Buffer.from(credential),
          tls,
        });
        const target = Buffer.alloc(where.length);
        try {
          await client.read(1, 0, target);
          return target;
        } finally {
          await client.close();
        }
      };
      assert.ok((await read({ ca: ca.ca }, CLUSTER)).equals(expected));
      await assert.rejects(read({ ca: ca.ca }, 'not-the-cluster-token'), (error) =>
        isWeightcastError(error, 'UNAUTHORIZED'),
      );
      await assert.rejects(read({ ca: otherCa.ca }, CLUSTER), (error) => {
        assert.ok(error instanceof Error);
        return /certificate/i.test(error.message);
      });
    });

    it('a client trusting another CA stops with TLS_UNTRUSTED naming --tls-ca', async () => {
      await assert.rejects(
        callJson(`${scheduler.url}/healthz`, 'the scheduler', {
          timeoutMs: 5000,
          access: { tls: { ca: otherCa.ca } },
        }),
        (error) => isWeightcastError(error, 'TLS_UNTRUSTED') && /--tls-ca/.test(error.message),
      );
      await assert.rejects(
        swarmPull(modelDir, join(work.path, 'untrusted'), {
          manifest,
          schedulerUrl: scheduler.url,
          access: { token: CLUSTER, tls: { ca: otherCa.ca } },
          signal: AbortSignal.timeout(30_000),
        }),
        (error) => isWeightcastError(error, 'TLS_UNTRUSTED'),
      );
      const io = memoryIo(AbortSignal.timeout(30_000));
      const code = await runCli(
        [
          'pull',
          modelDir,
          '--to',
          join(work.path, 'untrusted-cli'),
          '--manifest',
          manifestFile,
          '--scheduler',
          scheduler.url,
          '--tls-ca',
          otherCa.caFile,
        ],
        io,
      );
      assert.equal(code, 2);
      assert.match(io.err.join(''), /TLS_UNTRUSTED/);
    });

    it('weightcast serve over HTTPS: a pull trusting its CA reads the model, another CA is refused', async () => {
      const served = await startProcess(
        [CLI, 'serve', modelDir, '--tls-cert', serverCert.certFile, '--tls-key', serverCert.keyFile],
        /"url":"([^"]+)"/,
        'serve',
      );
      try {
        assert.match(served.url, /^https:\/\//);
        const pullFrom = async (caFile: string, to: string): Promise<{ code: number; err: string }> => {
          const io = memoryIo(AbortSignal.timeout(30_000));
          const code = await runCli(
            ['pull', served.url, '--to', join(work.path, to), '--manifest', manifestFile, '--tls-ca', caFile],
            io,
          );
          return { code, err: io.err.join('') };
        };
        const trusted = await pullFrom(ca.caFile, 'from-https-origin');
        assert.equal(trusted.code, 0, trusted.err);
        assert.ok(
          await sameFiles(
            join(work.path, 'from-https-origin'),
            modelDir,
            manifest.files.map((file) => file.path),
          ),
        );
        const untrusted = await pullFrom(otherCa.caFile, 'from-untrusted-origin');
        assert.equal(untrusted.code, 2, untrusted.err);
        assert.match(untrusted.err, /TLS_UNTRUSTED.*--tls-ca/);
      } finally {
        await stopProcess(served);
      }
    });

    it('over TLS one client address still cannot hold every connection (closed before the handshake)', async () => {
      const server = await startFileServer({
        root: modelDir,
        tls: { cert: serverCert.cert, key: serverCert.key },
        limits: { connectionsPerAddressMax: 4 },
      });
      const sockets: Socket[] = [];
      try {
        const port = server.port;
        const closed: Array<Promise<void>> = [];
        for (let i = 0; i < 10; i++) {
          const socket = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.2' });
          sockets.push(socket);
          closed.push(new Promise((resolve) => socket.once('close', () => resolve())));
          socket.on('error', () => undefined);
          await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
        }
        const settled = await Promise.race([
          Promise.all(closed.slice(4)).then(() => true),
          new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 5000)),
        ]);
        assert.ok(settled, 'connections over the cap were not closed');
        assert.equal(sockets.slice(0, 4).filter((socket) => socket.destroyed).length, 0);
        // Another address is served over TLS meanwhile.
        const status = await new Promise<number>((resolve, reject) => {
          const req = httpsRequest(
            `${server.url}config.json`,
            { ca: ca.ca, localAddress: '127.0.0.1', timeout: 5000 },
            (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            },
          );
          req.on('error', reject);
          req.end();
        });
        assert.equal(status, 200);
      } finally {
        for (const socket of sockets) socket.destroy();
        await server.close();
      }
    });

    it('NODE_EXTRA_CA_CERTS alone is trusted by the weightcast command, which keeps it from Node until TLS is used', async () => {
      const served = await startProcess(
        [CLI, 'serve', modelDir, '--tls-cert', serverCert.certFile, '--tls-key', serverCert.keyFile],
        /"url":"([^"]+)"/,
        'serve',
      );
      const tokenFile = join(work.path, 'cluster-token-extra-ca');
      await writeFile(tokenFile, `${CLUSTER}\n`, { mode: 0o600 });
      try {
        const withExtra = (file: string | undefined): NodeJS.ProcessEnv => {
          const env: NodeJS.ProcessEnv = { ...process.env };
          delete env['NODE_EXTRA_CA_CERTS'];
          delete env['WEIGHTCAST_EXTRA_CA_CERTS'];
          delete env['NODE_OPTIONS'];
          return file === undefined ? env : { ...env, NODE_EXTRA_CA_CERTS: file };
        };
        const pull = (
          args: string[],
          env: NodeJS.ProcessEnv,
        ): Promise<{ code: number; stdout: string; stderr: string }> =>
          runCommand(WEIGHTCAST, ['pull', ...args, '--manifest', manifestFile, '--json'], env);

        // An https origin (undici), with the CA given by the variable only.
        const fromOrigin = join(work.path, 'extra-ca-origin');
        const trusted = await pull([served.url, '--to', fromOrigin], withExtra(ca.caFile));
        assert.equal(trusted.code, 0, trusted.stderr);
        assert.ok(
          await sameFiles(
            fromOrigin,
            modelDir,
            manifest.files.map((file) => file.path),
          ),
        );
        const without = await pull(
          [served.url, '--to', join(work.path, 'no-extra-ca')],
          withExtra(undefined),
        );
        assert.equal(without.code, 2, without.stderr);
        assert.match(without.stdout + without.stderr, /TLS_UNTRUSTED/);

        // The scheduler's JSON calls (node:https), the peer wire (node:tls) and the peers' HTTP reads,
        // with a certificate of its own to present and serve with.
        const fromSwarm = join(work.path, 'extra-ca-swarm');
        const swarm = await pull(
          [
            modelDir,
            '--to',
            fromSwarm,
            '--scheduler',
            scheduler.url,
            '--cluster-token-file',
            tokenFile,
            '--tls-cert',
            serverCert.certFile,
            '--tls-key',
            serverCert.keyFile,
          ],
          withExtra(ca.caFile),
        );
        assert.equal(swarm.code, 0, swarm.stderr);
        const done = JSON.parse(swarm.stdout.trim().split('\n').at(-1) ?? '{}') as { peerBytes?: number };
        assert.ok((done.peerBytes ?? 0) > 0, swarm.stdout);
        assert.ok(
          await sameFiles(
            fromSwarm,
            modelDir,
            manifest.files.map((file) => file.path),
          ),
        );

        // Node warns at its start about a file it cannot read; behind the launcher it never sees the
        // variable, and weightcast warns only once a TLS connection needs the file.
        const missing = join(work.path, 'no-such-ca.crt');
        const nodeWarns = /Ignoring extra certs from/;
        const direct = await runCommand(process.execPath, [CLI, '--version'], withExtra(missing));
        assert.match(direct.stderr, nodeWarns, 'node itself reads the variable at start');
        const launched = await runCommand(WEIGHTCAST, ['--version'], withExtra(missing));
        assert.equal(launched.code, 0, launched.stderr);
        assert.doesNotMatch(launched.stderr, nodeWarns);
        const opensslStore = await runCommand(WEIGHTCAST, ['--version'], {
          ...withExtra(missing),
          NODE_OPTIONS: '--use-openssl-ca',
        });
        assert.match(opensslStore.stderr, nodeWarns, 'with another root store the variable stays with Node');
        const atFirstTls = await pull(
          [served.url, '--to', join(work.path, 'missing-extra-ca')],
          withExtra(missing),
        );
        assert.equal(atFirstTls.code, 2, atFirstTls.stderr);
        assert.match(atFirstTls.stderr, nodeWarns);
        assert.match(atFirstTls.stdout + atFirstTls.stderr, /TLS_UNTRUSTED/);
      } finally {
        await stopProcess(served);
      }
    });

    it('a peer whose certificate a puller does not trust is given up after a few tries; the origin serves instead', async () => {
      // The scheduler is trusted; the only agent holding the model serves with another CA's certificate.
      const ownScheduler = await startScheduler({
        credentials,
        tls: { cert: serverCert.cert, key: serverCert.key },
      });
      const foreign = await otherCa.issue('foreign-peer');
      const holder = await Agent.start({
        schedulerUrl: ownScheduler.url,
        cacheDir: join(work.path, 'foreign-holder'),
        credentials,
        access: { token: CLUSTER, tls: { ca: ca.ca } },
        tls: { cert: foreign.cert, key: foreign.key },
      });
      try {
        await holder.join({ source: modelDir, manifest });
        await holder.whenComplete(hex);
        const failed: number[] = [];
        const result = await swarmPull(modelDir, join(work.path, 'past-foreign-peer'), {
          manifest,
          schedulerUrl: ownScheduler.url,
          access: { token: CLUSTER, tls: { ca: ca.ca } },
          signal: AbortSignal.timeout(30_000),
          onEvent: (event) => {
            if (event.type === 'piece' && event.outcome === 'failed') failed.push(event.piece);
          },
        });
        assert.equal(result.peerBytes, 0);
        assert.ok(result.originBytes > 0);
        assert.ok(
          failed.length > 0 && failed.length <= 4 * PAIR_FAILURES_BAN,
          `${failed.length} failed fetches`,
        );
        assert.ok(
          await sameFiles(
            join(work.path, 'past-foreign-peer'),
            modelDir,
            manifest.files.map((file) => file.path),
          ),
        );
      } finally {
        await holder.close();
        await ownScheduler.close();
      }
    });

    it('a service verifying its callers refuses a client without a certificate from its CA', async () => {
      const strict = await startScheduler({
        tls: { cert: serverCert.cert, key: serverCert.key, ca: ca.ca, verifyClients: true },
      });
      try {
        const other = await otherCa.issue('client');
        for (const tls of [{ ca: ca.ca }, { ca: ca.ca, cert: other.cert, key: other.key }]) {
          await assert.rejects(
            callJson(`${strict.url}/healthz`, 'the scheduler', { timeoutMs: 5000, access: { tls } }),
            (error) => isWeightcastError(error, 'SCHEDULER_UNREACHABLE'),
          );
        }
        const answer = await callJson(`${strict.url}/healthz`, 'the scheduler', {
          timeoutMs: 5000,
          access: { tls: { ca: ca.ca, cert: clientCert.cert, key: clientCert.key } },
        });
        assert.deepEqual(answer, { ok: true });
      } finally {
        await strict.close();
      }
    });
  },
);
