import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { accepting, agentStartRetryDelayMs } from '../../src/swarm/agent-pull.js';

/** The attempts a pull makes at an agent that never answers, over `waitMs`: the moments it asks. */
function attempts(waitMs: number): number[] {
  const at = [0];
  for (let waited = 0; ;) {
    const delay = agentStartRetryDelayMs(waited);
    if (waited + delay > waitMs) return at;
    waited += delay;
    at.push(waited);
  }
}

describe('a pull waiting for its agent to start', () => {
  it('asks again at least every 20 ms for the first 2 s: it joins within that of the agent listening', () => {
    const moments = attempts(10_000).filter((at) => at <= 2_000);
    for (let i = 1; i < moments.length; i++)
      assert.ok(moments[i]! - moments[i - 1]! <= 20, `gap before ${moments[i]}`);
    assert.ok(moments.at(-1)! >= 1_980);
  });

  it('then asks every 250 ms, a bounded number of times until the wait is over', () => {
    const moments = attempts(10_000);
    const late = moments.filter((at) => at > 2_000);
    for (let i = 1; i < late.length; i++) assert.equal(late[i]! - late[i - 1]!, 250);
    assert.ok(moments.length <= 140, `${moments.length} attempts in 10 s`);
    assert.ok(moments.at(-1)! <= 10_000 && moments.at(-1)! > 9_700);
  });
});

describe('looking for an agent that is starting', () => {
  it('sees a refused port as not there, and a listening one as there', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      assert.equal(await accepting(`http://127.0.0.1:${port}`, 1_000), true);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    assert.equal(await accepting(`http://127.0.0.1:${port}`, 1_000), false);
  });
});
