import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { applyCommand, OutageSwitch, startFaultOrigin } from '../../bench/chaos/fault-origin.js';
import { fileBytes, makeTempModel } from '../origin/helpers.js';

const FAULT_ORIGIN = fileURLToPath(new URL('../../bench/chaos/fault-origin.js', import.meta.url));

test('the outage switch refuses inside its window only, extends and never shortens it, and counts', () => {
  const outage = new OutageSwitch();
  assert.equal(outage.faultAt(0), undefined);
  outage.down(1000, 500);
  assert.deepEqual(outage.faultAt(1000), { kind: 'status', status: 503, retryAfter: '1' });
  assert.equal(outage.isDown(1499), true);
  outage.down(1100, 100);
  assert.equal(outage.isDown(1499), true, 'a shorter second outage does not cut the first');
  outage.down(1400, 600);
  assert.equal(outage.isDown(1999), true);
  assert.equal(outage.isDown(2000), false);
  assert.equal(outage.refused, 1);
  assert.throws(() => outage.down(0, -1), RangeError);
  assert.throws(() => outage.down(0, Number.NaN), RangeError);
  assert.equal(applyCommand('outage 250', outage, 5000), '{"outage":250}');
  assert.equal(outage.isDown(5249), true);
  assert.equal(applyCommand(' refused ', outage, 0), '{"refused":1}');
  assert.throws(() => applyCommand('explode', outage, 0), /unknown command/);
});

test('a real file server answers 503 with Retry-After during the outage, and the file before and after', async () => {
  const model = await makeTempModel({ 'model/a.bin': 4096 });
  const { server, outage } = await startFaultOrigin({ root: model.dir });
  const get = (): Promise<Response> =>
    fetch(`${server.url}model/a.bin`, { headers: { range: 'bytes=0-99' } });
  try {
    const before = await get();
    assert.equal(before.status, 206);
    assert.deepEqual(
      Buffer.from(await before.arrayBuffer()),
      fileBytes(model, 'model/a.bin').subarray(0, 100),
    );
    outage.down(performance.now(), 300);
    const during = await get();
    await during.arrayBuffer();
    assert.equal(during.status, 503);
    assert.equal(during.headers.get('retry-after'), '1');
    assert.equal(outage.refused, 1);
    await sleep(350);
    const after = await get();
    assert.equal(after.status, 206);
    assert.equal((await after.arrayBuffer()).byteLength, 100);
  } finally {
    await server.close();
    await model.remove();
  }
});

test('as a process it prints its URL, takes outage and refused on stdin, and stops on SIGTERM', async () => {
  const model = await makeTempModel({ 'a.bin': 1000 });
  const child = spawn(process.execPath, [FAULT_ORIGIN, '--root', model.dir, '--port', '0'], {
    stdio: 'pipe',
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const nextLine = async (): Promise<string> => {
    const line = await Promise.race([lines.next(), sleep(10_000).then(() => undefined)]);
    if (line === undefined || line.done === true) throw new Error('no line from the fault origin');
    return line.value;
  };
  try {
    const { url } = JSON.parse(await nextLine()) as { url: string };
    child.stdin.write('outage 5000\n');
    assert.equal(await nextLine(), '{"outage":5000}');
    const refused = await fetch(`${url}a.bin`);
    await refused.arrayBuffer();
    assert.equal(refused.status, 503);
    child.stdin.write('refused\n');
    assert.equal(await nextLine(), '{"refused":1}');
    child.stdin.write('bogus\n');
    assert.match(await nextLine(), /"error":"unknown command/);
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
    await model.remove();
  }
});
