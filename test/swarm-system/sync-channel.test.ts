import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { encodeManifest, manifestDigest } from '../../src/manifest/manifest.js';
import { join } from 'node:path';
import { LocalOrigin } from '../../src/origin/local.js';
import { SwarmMember } from '../../src/swarm/agent/member.js';
import { PieceStore } from '../../src/piece/store.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { startScheduler } from '../../src/swarm/scheduler/scheduler-server.js';
import { Throttle } from '../../src/util/throttle.js';
import { tempDir } from '../helpers/fixtures.js';
import { fakeManifest, registerBareHost, testIdentity } from '../helpers/swarm.js';
import { parseMessage, registeredSchema } from '../../src/swarm/wire/protocol.js';
import { callJson } from '../../src/swarm/wire/http-json.js';
import { FrameReader, encodeFrame, frameError, openChannel } from '../../src/swarm/wire/sync-channel.js';

describe('sync channel framing', () => {
  it('splits frames across chunks, keeps partial ones, and refuses long or non-JSON frames', () => {
    const reader = new FrameReader(64);
    const bytes = Buffer.from(encodeFrame({ a: 1 }) + encodeFrame({ b: [2, 3] }) + '{"c":');
    assert.deepEqual(reader.push(bytes.subarray(0, 5)), []);
    assert.deepEqual(reader.push(bytes.subarray(5)), [{ a: 1 }, { b: [2, 3] }]);
    assert.deepEqual(reader.push(Buffer.from('4}\n')), [{ c: 4 }]);
    assert.throws(() => new FrameReader(64).push(Buffer.from('x'.repeat(65))), { code: 'SWARM_PROTOCOL' });
    assert.throws(() => new FrameReader(64).push(Buffer.from('not json\n')), { code: 'SWARM_PROTOCOL' });
  });

  it('turns an error frame into our error, and an unknown code into a protocol error', () => {
    assert.equal(frameError({ assignments: [] }, 'x'), undefined);
    assert.equal(
      frameError({ error: { code: 'SWARM_UNKNOWN_HOST', message: 'gone' } }, 'x')?.code,
      'SWARM_UNKNOWN_HOST',
    );
    assert.equal(frameError({ error: { code: 'RM_RF', message: 'no' } }, 'x')?.code, 'SWARM_PROTOCOL');
  });
});

/** A scheduler with one origin reader, a 4-piece model's swarm URL on it, and a 20 s deadline. */
async function oneReaderSwarm(): Promise<{
  scheduler: Awaited<ReturnType<typeof startScheduler>>;
  manifest: ReturnType<typeof fakeManifest>;
  base: string;
  signal: AbortSignal;
}> {
  const scheduler = await startScheduler({ originReaders: 1 });
  const manifest = fakeManifest(4);
  const hex = manifestDigest(manifest).slice('sha256:'.length);
  return {
    scheduler,
    manifest,
    base: `${scheduler.url}/v1/swarms/${hex}`,
    signal: AbortSignal.timeout(20_000),
  };
}

describe('sync channel against a real scheduler', () => {
  it('pushes assignments as they are made, answers reports, and refuses unknown hosts', async () => {
    const { scheduler, manifest, base, signal } = await oneReaderSwarm();
    try {
      const registered = (await registerBareHost(base, manifest, { name: 'a' })) as { host: number };
      await assert.rejects(openChannel(`${base}/hosts/${registered.host + 7}/channel`, signal), {
        code: 'SWARM_UNKNOWN_HOST',
      });
      const { socket, head } = await openChannel(`${base}/hosts/${registered.host}/channel`, signal);
      const reader = new FrameReader();
      const frames: unknown[] = reader.push(head);
      let wake: (() => void) | undefined;
      socket.on('data', (chunk: Buffer) => {
        frames.push(...reader.push(chunk));
        wake?.();
      });
      const next = async (): Promise<{ assignments: { transferId: number; piece: number }[] }> => {
        for (let i = 0; i < 100 && frames.length === 0; i++) {
          await new Promise<void>((resolve) => {
            wake = resolve;
            setTimeout(resolve, 100);
          });
        }
        const frame = frames.shift();
        assert.ok(frame !== undefined, 'no frame arrived');
        return frame as { assignments: { transferId: number; piece: number }[] };
      };
      // The host registered before the channel opened: its first assignment is waiting and pushed.
      const first = await next();
      assert.equal(first.assignments.length, 1);
      // A report is answered with the next assignment (one origin reader, one transfer at a time).
      socket.write(
        encodeFrame({
          reports: [{ transferId: first.assignments[0]!.transferId, outcome: 'verified' }],
          waitMs: 0,
        }),
      );
      const second = await next();
      assert.equal(second.assignments.length, 1);
      assert.notEqual(second.assignments[0]!.piece, first.assignments[0]!.piece);
      // A frame the scheduler cannot accept gets an error frame and the channel closes.
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.write(encodeFrame({ reports: 'nonsense' }));
      await closed;
      const last = frames.pop();
      assert.equal(frameError(last, 'the scheduler')?.code, 'SWARM_PROTOCOL');
    } finally {
      await scheduler.close();
    }
  });

  it('hands a host that asks for it its first assignment in the register reply; the channel takes its report', async () => {
    const { scheduler, manifest, base, signal } = await oneReaderSwarm();
    const registerAs = async (name: string, assignmentsInReply: boolean): Promise<unknown> =>
      registerBareHost(base, manifest, { name, assignmentsInReply, url: `http://127.0.0.1:9/${name}` });
    try {
      const registered = parseMessage(registeredSchema, await registerAs('eager', true), 'register reply');
      assert.equal(registered.assignments?.length, 1, 'the first assignment comes with the reply');
      const first = registered.assignments[0]!;
      assert.equal(first.from, 'origin');
      const { socket, head } = await openChannel(`${base}/hosts/${registered.host}/channel`, signal);
      const reader = new FrameReader();
      const frames: unknown[] = reader.push(head);
      socket.on('data', (chunk: Buffer) => frames.push(...reader.push(chunk)));
      socket.write(
        encodeFrame({ reports: [{ transferId: first.transferId, outcome: 'verified' }], waitMs: 0 }),
      );
      let next: { transferId: number; piece: number } | undefined;
      for (let i = 0; i < 100 && next === undefined; i++) {
        const frame = frames.shift() as
          { assignments: Array<{ transferId: number; piece: number }> } | undefined;
        if (frame === undefined) await new Promise((resolve) => setTimeout(resolve, 20));
        next = frame?.assignments[0];
      }
      assert.ok(next !== undefined, 'the report was answered with the next assignment');
      assert.notEqual(next.piece, first.piece, 'the reported piece counts as held');
      socket.destroy();
      // Without the flag (an older agent), the reply lists nothing: its work waits for its channel.
      const plain = parseMessage(registeredSchema, await registerAs('plain', false), 'register reply');
      assert.equal(plain.assignments, undefined);
    } finally {
      await scheduler.close();
    }
  });

  it('closes a channel whose host registered again (ids are reused), so it cannot take the new replies', async () => {
    const { scheduler, manifest, base, signal } = await oneReaderSwarm();
    const register = async (): Promise<number> =>
      ((await registerBareHost(base, manifest, { name: 'same-name' })) as { host: number }).host;
    try {
      const first = await register();
      const old = await openChannel(`${base}/hosts/${first}/channel`, signal);
      const oldReader = new FrameReader();
      const oldFrames: unknown[] = oldReader.push(old.head);
      old.socket.on('data', (chunk: Buffer) => oldFrames.push(...oldReader.push(chunk)));
      const oldClosed = new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('the stale channel stayed open')), 5000);
        old.socket.once('close', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      // The agent "restarts" and registers again under its name: same id, new registration.
      const second = await register();
      assert.equal(second, first, 'the id is reused (the case this guards)');
      await oldClosed;
      assert.equal(frameError(oldFrames.at(-1), 'the scheduler')?.code, 'SWARM_UNKNOWN_HOST');
      const fresh = await openChannel(`${base}/hosts/${second}/channel`, signal);
      const reader = new FrameReader();
      const frames: unknown[] = reader.push(fresh.head);
      for (let i = 0; i < 50 && frames.length === 0; i++) {
        await new Promise<void>((resolve) => {
          fresh.socket.once('data', (chunk: Buffer) => {
            frames.push(...reader.push(chunk));
            resolve();
          });
          setTimeout(resolve, 100);
        });
      }
      const reply = frames[0] as { assignments: unknown[] } | undefined;
      assert.equal(
        reply?.assignments.length,
        1,
        'the new registration gets its assignment on its own channel',
      );
      fresh.socket.destroy();
    } finally {
      await scheduler.close();
    }
  });
});

describe('a member registering with a real scheduler', () => {
  for (const [name, inlineMax] of [
    ['sends a small manifest with its first registration', undefined],
    ['sends a large manifest only once the scheduler asks for it', 0],
  ] as const) {
    it(name, async () => {
      const scheduler = await startScheduler({ originReaders: 1 });
      const dir = await tempDir('member-register');
      const manifest = fakeManifest(4);
      const map = new PieceMap(manifest);
      const store = await PieceStore.open(map, { dataDir: join(dir.path, 'data'), stateDir: dir.path });
      const origin = new LocalOrigin(join(dir.path, 'no-model-here'));
      let member: SwarmMember | undefined;
      try {
        const registered = new Promise<number>((resolve, reject) => {
          member = new SwarmMember({
            model: manifestDigest(manifest).slice('sha256:'.length),
            map,
            manifestBytes: encodeManifest(manifest),
            store,
            origin,
            schedulerUrl: scheduler.url,
            identity: testIdentity('a'),
            downloadThrottle: new Throttle(undefined),
            ...(inlineMax === undefined ? {} : { manifestInlineBytesMax: inlineMax }),
            onEvent: (event) => {
              if (event.type === 'registered') resolve(event.host);
              if (event.type === 'scheduler-lost') reject(new Error(event.reason));
            },
          });
          member.start();
        });
        assert.equal(await registered, 0);
        assert.equal(scheduler.swarms.size, 1, 'the swarm was created from the manifest it was sent');
      } finally {
        await member?.close();
        await store.close();
        await origin.close();
        await scheduler.close();
        await dir.cleanup();
      }
    });
  }
});

describe('a second sync channel for the same host', () => {
  it('ends its registration when it breaks (the agent registers anew): a dead host holds no origin reader', async () => {
    const { scheduler, manifest, base, signal } = await oneReaderSwarm();
    try {
      const dead = (await registerBareHost(base, manifest, { name: 'dead' })) as { host: number };
      const { socket } = await openChannel(`${base}/hosts/${dead.host}/channel`, signal);
      // Its first assignment holds the swarm's one origin reader; then it dies without a word.
      await new Promise((resolve) => setTimeout(resolve, 100));
      socket.destroy();
      const hosts = async (): Promise<number[]> =>
        (
          (await callJson(base, 'the scheduler', { timeoutMs: 5000 })) as { hosts: { host: number }[] }
        ).hosts.map((entry) => entry.host);
      for (let wait = 0; wait < 40 && (await hosts()).includes(dead.host); wait++)
        await new Promise((resolve) => setTimeout(resolve, 25));
      assert.deepEqual(await hosts(), [], 'the dead host was kept (it would be until the 10 s host timeout)');
      // The origin reader is free again: a new host gets its first assignment in the register reply.
      const next = (await registerBareHost(base, manifest, { name: 'next', assignmentsInReply: true })) as {
        assignments?: unknown[];
      };
      assert.equal(next.assignments?.length, 1);
    } finally {
      await scheduler.close();
    }
  });

  it('replaces the first instead of waking it forever, and the scheduler keeps answering', async () => {
    const { scheduler, manifest, base, signal } = await oneReaderSwarm();
    try {
      const registered = (await registerBareHost(base, manifest, { name: 'twice' })) as { host: number };
      const url = `${base}/hosts/${registered.host}/channel`;
      const first = await openChannel(url, signal);
      const firstClosed = new Promise<string>((resolve) => {
        const reader = new FrameReader();
        const seen: unknown[] = [...reader.push(first.head)];
        first.socket.on('data', (chunk: Buffer) => seen.push(...reader.push(chunk)));
        first.socket.on('close', () => {
          const error = seen.map((frame) => frameError(frame, 'the scheduler')).find((e) => e !== undefined);
          resolve(error?.message ?? 'closed without an error frame');
        });
      });
      const second = await openChannel(url, signal);
      assert.match(await firstClosed, /another sync channel/);
      // Before the fix the two channels woke each other on every microtask: nothing else ran.
      for (let i = 0; i < 5; i++) {
        const health = await fetch(`${scheduler.url}/healthz`, { signal: AbortSignal.timeout(1000) });
        assert.equal(health.status, 200);
      }
      assert.equal(second.socket.destroyed, false);
      second.socket.destroy();
    } finally {
      await scheduler.close();
    }
  });
});
